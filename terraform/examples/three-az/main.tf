# A complete Oxbow cluster over three zones: VPC, S3 bucket, three etcd members, an
# autoscaled broker group and a network load balancer. See README.md beside this file
# for how to apply it and what it costs.

data "aws_caller_identity" "current" {}

locals {
  bucket_name        = coalesce(var.bucket_name, "${var.name}-log-${data.aws_caller_identity.current.account_id}")
  client_cidr_blocks = length(var.client_cidr_blocks) > 0 ? var.client_cidr_blocks : [var.vpc_cidr]
}

module "network" {
  source = "../../modules/network"

  name         = var.name
  cidr_block   = var.vpc_cidr
  nat_gateways = var.nat_gateways
}

module "storage" {
  source = "../../modules/storage"

  bucket_name               = local.bucket_name
  broker_role_arns          = [module.brokers.role_arn]
  snapshot_writer_role_arns = [module.etcd.role_arn]
}

module "etcd" {
  source = "../../modules/etcd"

  name                      = var.name
  vpc_id                    = module.network.vpc_id
  subnet_ids                = module.network.private_subnet_ids
  instance_type             = var.etcd_instance_type
  client_security_group_ids = [module.brokers.security_group_id]
  snapshot_bucket_name      = local.bucket_name
  snapshot_prefix           = module.storage.snapshot_prefix
}

module "nlb" {
  source = "../../modules/nlb"

  name                = var.name
  vpc_id              = module.network.vpc_id
  subnet_ids          = var.internet_facing ? module.network.public_subnet_ids : module.network.private_subnet_ids
  internal            = !var.internet_facing
  client_cidr_blocks  = var.internet_facing ? ["0.0.0.0/0"] : local.client_cidr_blocks
  deletion_protection = var.deletion_protection
}

module "brokers" {
  source = "../../modules/brokers"

  name                             = var.name
  vpc_id                           = module.network.vpc_id
  vpc_cidr_block                   = module.network.vpc_cidr_block
  subnet_ids                       = module.network.private_subnet_ids
  instance_type                    = var.broker_instance_type
  min_size                         = var.brokers_min
  max_size                         = var.brokers_max
  oxbow_artifact_url               = var.oxbow_artifact_url
  oxbow_artifact_sha256            = var.oxbow_artifact_sha256
  metadata_url                     = "etcd://${module.etcd.metadata_hosts}/${var.name}"
  bucket_arn                       = module.storage.bucket_arn
  object_store_url                 = module.storage.object_store_url
  data_prefix                      = module.storage.data_prefix
  client_cidr_blocks               = local.client_cidr_blocks
  load_balancer_security_group_ids = [module.nlb.security_group_id]
  target_group_arns                = module.nlb.target_group_arns
}
