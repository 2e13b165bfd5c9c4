output "endpoints" {
  description = "Client URLs of the three members (http://IP:2379)."
  value       = [for ip in local.member_ips : "http://${ip}:2379"]
}

output "metadata_hosts" {
  description = "host:port of the three members, joined with commas: the host list of the brokers' --metadata etcd://... value."
  value       = join(",", [for ip in local.member_ips : "${ip}:2379"])
}

output "member_private_ips" {
  description = "Fixed private addresses of the members, in zone order."
  value       = local.member_ips
}

output "security_group_id" {
  description = "Security group of the members."
  value       = aws_security_group.etcd.id
}

output "role_arn" {
  description = "IAM role of the members (give it to the storage module's snapshot_writer_role_arns)."
  value       = aws_iam_role.etcd.arn
}

output "instance_ids" {
  description = "Instance IDs of the members, in zone order."
  value       = aws_instance.member[*].id
}
