variable "bucket_name" {
  description = "Name of the S3 bucket holding the log (sealed objects, segments) and etcd snapshots; globally unique."
  type        = string
}

variable "data_prefix" {
  description = "Key prefix of the brokers' objects (their --object-store is s3://BUCKET/PREFIX). Brokers may touch nothing else in the bucket."
  type        = string
  default     = "oxbow"

  validation {
    condition     = length(var.data_prefix) > 0 && !startswith(var.data_prefix, "/") && !endswith(var.data_prefix, "/")
    error_message = "data_prefix must be non-empty, without a leading or trailing slash."
  }
}

variable "snapshot_prefix" {
  description = "Key prefix of etcd snapshots (outside data_prefix, so the brokers' orphan sweep never sees them)."
  type        = string
  default     = "etcd-snapshots"
}

variable "snapshot_retention_days" {
  description = "Days an etcd snapshot is kept before a lifecycle rule deletes it."
  type        = number
  default     = 14
}

variable "broker_role_arns" {
  description = "IAM role ARNs of the brokers: the only principals allowed to read and write data_prefix."
  type        = list(string)
}

variable "snapshot_writer_role_arns" {
  description = "IAM role ARNs allowed to write and read snapshot_prefix (the etcd members)."
  type        = list(string)
  default     = []
}

variable "admin_role_arns" {
  description = "Extra principals (operators, backup jobs) allowed to read and write objects; everyone else is denied object access by the bucket policy."
  type        = list(string)
  default     = []
}

variable "kms_key_arn" {
  description = "KMS key for SSE-KMS (with an S3 bucket key, so KMS is not called per object). Null: SSE-S3 (AES-256, no per-request charge)."
  type        = string
  default     = null
}

variable "abort_incomplete_multipart_days" {
  description = "Days after which an unfinished multipart upload (a broker that died mid-upload) is aborted and its parts deleted."
  type        = number
  default     = 1
}

variable "express_one_zone_az_ids" {
  description = "Zone IDs (e.g. the three broker zones' IDs) to create an S3 Express One Zone directory bucket in, for low-latency --durability direct. Empty: none."
  type        = list(string)
  default     = []
}

variable "force_destroy" {
  description = "Let terraform destroy delete a non-empty bucket (every record in it). Keep false outside tests."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
