variable "name" {
  description = "Name prefix of the load balancer and its target groups (the load balancer's name is truncated to AWS's 32 characters)."
  type        = string
}

variable "vpc_id" {
  description = "VPC of the brokers."
  type        = string
}

variable "subnet_ids" {
  description = "Subnets of the load balancer, one per zone: the private ones for an internal load balancer, the public ones for an internet-facing one."
  type        = list(string)
}

variable "internal" {
  description = "Internal load balancer (reachable from the VPC and networks routed to it) or internet-facing. Kafka clients need the brokers' private addresses either way (see the README's listener scheme); an internet-facing one serves the HTTP API fully and Kafka bootstrap only."
  type        = bool
  default     = true
}

variable "client_cidr_blocks" {
  description = "Networks allowed to connect to the load balancer's listeners."
  type        = list(string)
}

variable "kafka_port" {
  description = "Kafka port: the listener's and the brokers'."
  type        = number
  default     = 9092
}

variable "http_port" {
  description = "HTTP API port: the listener's and the brokers' (also where /readyz is probed)."
  type        = number
  default     = 8080
}

variable "cross_zone" {
  description = "Cross-zone load balancing. Off: each zone's load balancer node sends only to brokers in its zone, so bootstrap and HTTP traffic cross no zone (billed per GB)."
  type        = bool
  default     = false
}

variable "deletion_protection" {
  description = "Refuse to delete the load balancer (set false before terraform destroy)."
  type        = bool
  default     = true
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}
