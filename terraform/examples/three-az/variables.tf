variable "name" {
  description = "Name of this deployment: prefix of every resource and the etcd cluster name."
  type        = string
  default     = "oxbow"
}

variable "oxbow_artifact_url" {
  description = "s3:// or https:// URL of the oxbow binary for Linux x86_64 (see the README's Deploy section)."
  type        = string
}

variable "oxbow_artifact_sha256" {
  description = "SHA-256 of that binary (sha256sum oxbow)."
  type        = string
}

variable "vpc_cidr" {
  description = "IPv4 range of the new VPC."
  type        = string
  default     = "10.40.0.0/16"
}

variable "client_cidr_blocks" {
  description = "Networks of Kafka and HTTP clients; empty: the VPC itself."
  type        = list(string)
  default     = []
}

variable "bucket_name" {
  description = "S3 bucket name; null: NAME-log-ACCOUNT_ID."
  type        = string
  default     = null
}

variable "broker_instance_type" {
  description = "Broker instance type (with NVMe instance store for the WAL)."
  type        = string
  default     = "m6id.large"
}

variable "etcd_instance_type" {
  description = "etcd member instance type."
  type        = string
  default     = "m6i.large"
}

variable "brokers_min" {
  description = "Fewest brokers (three: one per zone)."
  type        = number
  default     = 3
}

variable "brokers_max" {
  description = "Most brokers the group scales out to."
  type        = number
  default     = 12
}

variable "nat_gateways" {
  description = "per_az, single or none (see the network module)."
  type        = string
  default     = "per_az"
}

variable "internet_facing" {
  description = "Put the load balancer in the public subnets, internet-facing (HTTP API fully usable from outside; Kafka clients still need the VPC)."
  type        = bool
  default     = false
}

variable "deletion_protection" {
  description = "Protect the load balancer from deletion (set false, apply, then destroy)."
  type        = bool
  default     = true
}
