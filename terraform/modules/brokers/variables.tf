variable "name" {
  description = "Name prefix of the broker group and its resources."
  type        = string
}

variable "vpc_id" {
  description = "VPC the brokers run in."
  type        = string
}

variable "vpc_cidr_block" {
  description = "IPv4 range of the VPC: a broker's id is its private address's offset into it (unique among running instances, no coordination)."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets of the three zones the group spreads brokers over."
  type        = list(string)

  validation {
    condition     = length(var.subnet_ids) == 3
    error_message = "Brokers span exactly three zones: give three subnets."
  }
}

variable "instance_type" {
  description = "Broker instance type. A type with local NVMe (the d in m6id) holds the WAL on fast disk that costs nothing extra; without one the WAL goes to the root EBS volume."
  type        = string
  default     = "m6id.large"
}

variable "ami_ssm_parameter" {
  description = "SSM public parameter naming the AMI (Ubuntu 24.04 by default; its architecture must match the artifact and instance type)."
  type        = string
  default     = "/aws/service/canonical/ubuntu/server/24.04/stable/current/amd64/hvm/ebs-gp3/ami-id"
}

variable "root_volume_size_gib" {
  description = "Root EBS volume size (gp3); holds the WAL only on instance types without NVMe instance store."
  type        = number
  default     = 30
}

variable "min_size" {
  description = "Fewest brokers. Three (one per zone) is the least that keeps acks=all writable after losing a zone with the default WAL replication factor 3 and min.insync.replicas 2."
  type        = number
  default     = 3
}

variable "max_size" {
  description = "Most brokers the group may scale out to."
  type        = number
  default     = 12
}

variable "desired_capacity" {
  description = "Initial broker count; null lets the group start at min_size. Target tracking changes it afterwards (Terraform ignores that drift)."
  type        = number
  default     = null
}

variable "oxbow_artifact_url" {
  description = "Where instances download the oxbow binary (Linux, the AMI's architecture): s3://bucket/key (read with the broker role) or https://."
  type        = string

  validation {
    condition     = can(regex("^(s3|https)://", var.oxbow_artifact_url))
    error_message = "oxbow_artifact_url must be an s3:// or https:// URL."
  }
}

variable "oxbow_artifact_sha256" {
  description = "SHA-256 of the binary at oxbow_artifact_url; an instance refuses a download that does not match."
  type        = string

  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.oxbow_artifact_sha256))
    error_message = "oxbow_artifact_sha256 must be 64 lower-case hex digits."
  }
}

variable "metadata_url" {
  description = "The brokers' --metadata value: etcd://host:2379,host:2379,host:2379/CLUSTER."
  type        = string
}

variable "bucket_arn" {
  description = "ARN of the log's S3 bucket."
  type        = string
}

variable "object_store_url" {
  description = "The brokers' --object-store value, s3://BUCKET/PREFIX."
  type        = string
}

variable "data_prefix" {
  description = "Key prefix the brokers may read, write, list and delete (the PREFIX of object_store_url)."
  type        = string
}

variable "express_bucket_arns" {
  description = "ARNs of S3 Express One Zone directory buckets the brokers may open sessions on (empty: none)."
  type        = list(string)
  default     = []
}

variable "kafka_port" {
  description = "Kafka listener port on every broker (and its advertised port)."
  type        = number
  default     = 9092
}

variable "http_port" {
  description = "HTTP API port (/metrics, /readyz, REST Proxy v2) on every broker."
  type        = number
  default     = 8080
}

variable "internal_port" {
  description = "Broker-to-broker port (WAL replication, tail recovery), open only between brokers."
  type        = number
  default     = 7070
}

variable "client_cidr_blocks" {
  description = "Networks whose Kafka and HTTP clients may connect to brokers directly (brokers advertise their private addresses); usually the VPC and networks routed to it."
  type        = list(string)
}

variable "load_balancer_security_group_ids" {
  description = "Security groups of load balancers in front of the brokers (the nlb module's), allowed to the Kafka and HTTP ports."
  type        = list(string)
  default     = []
}

variable "target_group_arns" {
  description = "Load balancer target groups the group registers its brokers in (the nlb module's)."
  type        = list(string)
  default     = []
}

variable "target_appended_bytes_per_second" {
  description = "Target of the target-tracking policy: mean bytes per second each broker appends as a partition leader (oxbow_appended_bytes_total's rate). Scale out above it, in below it. The default, 20 MiB/s, is well under what one broker took in the project's 2-vCPU measurements (~33 MiB/s each, 3 brokers at 99 MiB/s), leaving room for replication and fetches."
  type        = number
  default     = 20971520
}

variable "cpu_target_percent" {
  description = "Second target-tracking policy on average CPU (catches fetch-heavy load that ingest does not show); null disables it. Auto Scaling scales out when either policy asks and in only when both allow."
  type        = number
  default     = 70
}

variable "metrics_namespace" {
  description = "CloudWatch namespace the brokers publish AppendedBytesPerSecond to."
  type        = string
  default     = "Oxbow"
}

variable "handoff_timeout_seconds" {
  description = "How long the termination lifecycle hook holds a terminating instance for its broker to hand over (then it is terminated anyway). Must exceed the unit's TimeoutStopSec (180 s)."
  type        = number
  default     = 300

  validation {
    condition     = var.handoff_timeout_seconds > 180 && var.handoff_timeout_seconds <= 7200
    error_message = "handoff_timeout_seconds must be above the unit's TimeoutStopSec (180) and at most 7200."
  }
}

variable "instance_warmup_seconds" {
  description = "Seconds a new broker's metrics are left out of the group's aggregates after launch (install, start, taking its share of partitions)."
  type        = number
  default     = 300
}

variable "extra_environment" {
  description = "More OXBOW_* settings for every broker (e.g. { OXBOW_FLUSH_INTERVAL = \"250ms\" }); they override the derived ones."
  type        = map(string)
  default     = {}
}

variable "enable_ssm_session" {
  description = "Attach AmazonSSMManagedInstanceCore so operators reach brokers through Session Manager (no SSH, no key pairs)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags added to every resource (and propagated to the brokers' instances)."
  type        = map(string)
  default     = {}
}
