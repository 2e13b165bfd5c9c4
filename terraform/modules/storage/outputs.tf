output "bucket_name" {
  description = "Name of the bucket."
  value       = aws_s3_bucket.this.id
}

output "bucket_arn" {
  description = "ARN of the bucket."
  value       = aws_s3_bucket.this.arn
}

output "data_prefix" {
  description = "Key prefix of the brokers' objects."
  value       = var.data_prefix
}

output "object_store_url" {
  description = "The brokers' --object-store value."
  value       = "s3://${aws_s3_bucket.this.id}/${var.data_prefix}"
}

output "snapshot_prefix" {
  description = "Key prefix of etcd snapshots."
  value       = var.snapshot_prefix
}

output "express_bucket_names" {
  description = "S3 Express One Zone directory bucket names by zone ID (empty when none were asked for)."
  value       = { for az, b in aws_s3_directory_bucket.express : az => b.bucket }
}

output "express_bucket_arns" {
  description = "S3 Express One Zone directory bucket ARNs by zone ID."
  value       = { for az, b in aws_s3_directory_bucket.express : az => b.arn }
}
