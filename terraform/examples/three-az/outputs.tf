output "kafka_bootstrap" {
  description = "bootstrap.servers for Kafka clients in the VPC (or routed to it)."
  value       = module.nlb.kafka_bootstrap
}

output "http_url" {
  description = "Base URL of the HTTP API."
  value       = module.nlb.http_url
}

output "bucket_name" {
  description = "The log's S3 bucket."
  value       = module.storage.bucket_name
}

output "etcd_endpoints" {
  description = "Client URLs of the etcd members."
  value       = module.etcd.endpoints
}

output "autoscaling_group_name" {
  description = "The brokers' autoscaling group."
  value       = module.brokers.autoscaling_group_name
}

output "scaling_metric" {
  description = "CloudWatch metric the brokers scale on."
  value       = module.brokers.scaling_metric
}
