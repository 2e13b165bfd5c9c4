output "dns_name" {
  description = "DNS name of the load balancer."
  value       = aws_lb.this.dns_name
}

output "kafka_bootstrap" {
  description = "bootstrap.servers for Kafka clients."
  value       = "${aws_lb.this.dns_name}:${var.kafka_port}"
}

output "http_url" {
  description = "Base URL of the HTTP API (REST Proxy v2, /metrics of one broker)."
  value       = "http://${aws_lb.this.dns_name}:${var.http_port}"
}

output "target_group_arns" {
  description = "Target groups the brokers' autoscaling group registers in (Kafka, HTTP)."
  value       = [aws_lb_target_group.kafka.arn, aws_lb_target_group.http.arn]
}

output "security_group_id" {
  description = "Security group of the load balancer (allowed into the brokers' security group)."
  value       = aws_security_group.nlb.id
}

output "arn" {
  description = "ARN of the load balancer."
  value       = aws_lb.this.arn
}
