output "vpc_id" {
  description = "ID of the VPC."
  value       = aws_vpc.this.id
}

output "vpc_cidr_block" {
  description = "IPv4 range of the VPC (brokers derive their broker id from their address's offset in it)."
  value       = aws_vpc.this.cidr_block
}

output "azs" {
  description = "The three availability zone names, in subnet order."
  value       = local.azs
}

output "private_subnet_ids" {
  description = "Private subnet IDs, one per zone in the order of azs (brokers, etcd)."
  value       = aws_subnet.private[*].id
}

output "private_subnet_cidr_blocks" {
  description = "IPv4 ranges of the private subnets, in the order of azs."
  value       = aws_subnet.private[*].cidr_block
}

output "public_subnet_ids" {
  description = "Public subnet IDs, one per zone in the order of azs (an internet-facing load balancer, NAT)."
  value       = aws_subnet.public[*].id
}

output "private_route_table_ids" {
  description = "Route tables of the private subnets (for more gateway endpoints, e.g. S3 Express)."
  value       = aws_route_table.private[*].id
}

output "s3_endpoint_id" {
  description = "ID of the S3 gateway endpoint."
  value       = aws_vpc_endpoint.s3.id
}
