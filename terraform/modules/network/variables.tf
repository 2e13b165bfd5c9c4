variable "name" {
  description = "Name prefix of every resource of this deployment (also its Name tags)."
  type        = string
}

variable "cidr_block" {
  description = "IPv4 range of the VPC. Each zone gets 1/16 of it for brokers and etcd (private: a /20 of a /16) and 1/256 for the load balancer and NAT (public: a /24)."
  type        = string
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.cidr_block, 0))
    error_message = "cidr_block must be an IPv4 CIDR such as 10.40.0.0/16."
  }
}

variable "azs" {
  description = "Availability zone names to use, exactly three (one broker and etcd zone each). Empty: the first three zones of the provider's region."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.azs) == 0 || length(var.azs) == 3
    error_message = "azs must be empty or name exactly three zones."
  }
}

variable "nat_gateways" {
  description = "NAT for the private subnets (package installs, AWS APIs; S3 goes through the free gateway endpoint instead): \"per_az\" (one per zone, survives a zone loss, ~3x the hourly cost), \"single\" or \"none\" (only if instances reach what they need through VPC endpoints or a proxy)."
  type        = string
  default     = "per_az"

  validation {
    condition     = contains(["per_az", "single", "none"], var.nat_gateways)
    error_message = "nat_gateways must be per_az, single or none."
  }
}

variable "s3_express_endpoint" {
  description = "Also add a gateway endpoint for S3 Express One Zone (needed when brokers use the storage module's directory buckets)."
  type        = bool
  default     = false
}

variable "flow_logs_retention_days" {
  description = "Days VPC flow logs (rejected connections only) are kept in CloudWatch Logs; 0 disables flow logs."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
