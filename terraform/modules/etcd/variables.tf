variable "name" {
  description = "Name prefix of the etcd members and their resources."
  type        = string
}

variable "vpc_id" {
  description = "VPC the members run in."
  type        = string
}

variable "subnet_ids" {
  description = "Three private subnets, one per zone: member i runs in subnet i."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) == 3
    error_message = "etcd runs three members, one per zone: give exactly three subnets."
  }
}

variable "member_host_number" {
  description = "Host number of each member's fixed private address inside its subnet (cidrhost). Fixed addresses keep the static --initial-cluster valid when an instance is replaced."
  type        = number
  default     = 10
}

variable "client_security_group_ids" {
  description = "Security groups allowed to reach the members' client port 2379 (the brokers)."
  type        = list(string)
}

variable "instance_type" {
  description = "Instance type of each member. etcd wants steady CPU and low-latency disk more than size; Oxbow's load on it is about one transaction per broker per flush interval."
  type        = string
  default     = "m6i.large"
}

variable "ami_ssm_parameter" {
  description = "SSM public parameter naming the AMI (Ubuntu 24.04, whose etcd-server package is etcd 3.4, the major version Oxbow's tests run against)."
  type        = string
  default     = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
}

variable "data_volume_size_gib" {
  description = "Size of each member's EBS data volume (gp3). etcd's quota_backend_bytes must fit with room for a defrag's copy."
  type        = number
  default     = 50
}

variable "data_volume_iops" {
  description = "Provisioned IOPS of each data volume (gp3 includes 3000). etcd fsyncs every write."
  type        = number
  default     = 3000
}

variable "data_volume_throughput_mibps" {
  description = "Throughput of each data volume in MiB/s (gp3 includes 125)."
  type        = number
  default     = 125
}

variable "quota_backend_bytes" {
  description = "etcd's --quota-backend-bytes: past it etcd refuses every write (NOSPACE). 8 GiB is etcd's recommended maximum; Oxbow compacts history itself and keeps a few MiB live."
  type        = number
  default     = 8589934592
}

variable "auto_compaction_retention" {
  description = "etcd's --auto-compaction-retention in periodic mode (e.g. \"1h\"). Oxbow's controller also compacts (--metadata-history-retention); this is the backstop."
  type        = string
  default     = "1h"
}

variable "defrag_hour_utc" {
  description = "Hour (UTC) member 0 defragments; member i runs i hours later, so only one member at a time blocks."
  type        = number
  default     = 3

  validation {
    condition     = var.defrag_hour_utc >= 0 && var.defrag_hour_utc <= 21
    error_message = "defrag_hour_utc must be 0..21 (three members, one hour apart, same day)."
  }
}

variable "snapshot_bucket_name" {
  description = "Bucket etcd snapshots are uploaded to."
  type        = string
}

variable "snapshot_prefix" {
  description = "Key prefix of the snapshots in snapshot_bucket_name (the storage module's snapshot_prefix)."
  type        = string
}

variable "snapshot_interval" {
  description = "systemd OnCalendar expression of how often each member snapshots its database to S3."
  type        = string
  default     = "hourly"
}

variable "enable_ssm_session" {
  description = "Attach AmazonSSMManagedInstanceCore so operators reach members through Session Manager (no SSH, no key pairs)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
