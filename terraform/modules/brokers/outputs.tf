output "autoscaling_group_name" {
  description = "Name of the brokers' autoscaling group."
  value       = aws_autoscaling_group.broker.name
}

output "lifecycle_hook_name" {
  description = "Name of the termination lifecycle hook the brokers complete after their handoff."
  value       = local.lifecycle_hook_name
}

output "security_group_id" {
  description = "Security group of the brokers (give it to the etcd module's client_security_group_ids)."
  value       = aws_security_group.broker.id
}

output "role_arn" {
  description = "IAM role of the brokers (give it to the storage module's broker_role_arns)."
  value       = aws_iam_role.broker.arn
}

output "launch_template_id" {
  description = "ID of the brokers' launch template."
  value       = aws_launch_template.broker.id
}

output "internal_secret_parameter" {
  description = "SSM parameter holding the internal-port secret."
  value       = aws_ssm_parameter.internal_secret.name
}

output "scaling_metric" {
  description = "The CloudWatch metric the target-tracking policy follows (namespace/name)."
  value       = "${var.metrics_namespace}/AppendedBytesPerSecond"
}
