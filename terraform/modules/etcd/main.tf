# etcd, the source of truth: three members, one per zone, each on an instance with a fixed
# private address (a network interface that outlives the instance) and an EBS data volume
# (also outliving it), so a replaced instance rejoins as the same member with its data.
# Each member runs etcd with auto-compaction and a backend quota, defragments once a day
# (members an hour apart) and uploads a snapshot to S3 on a timer.

data "aws_partition" "current" {}

data "aws_region" "current" {}

data "aws_ssm_parameter" "ami" {
  name = var.ami_ssm_parameter
}

data "aws_subnet" "member" {
  count = 3

  id = var.subnet_ids[count.index]
}

locals {
  member_names = [for i in range(3) : "${var.name}-etcd-${i}"]
  member_ips   = [for s in data.aws_subnet.member : cidrhost(s.cidr_block, var.member_host_number)]
  initial_cluster = join(",", [
    for i in range(3) : "${local.member_names[i]}=http://${local.member_ips[i]}:2380"
  ])
  snapshot_arn = "arn:${data.aws_partition.current.partition}:s3:::${var.snapshot_bucket_name}/${var.snapshot_prefix}"
}

# -- network ---------------------------------------------------------------------------

resource "aws_security_group" "etcd" {
  name_prefix = "${var.name}-etcd-"
  description = "etcd members: clients on 2379 from the brokers, peers on 2380 from each other"
  vpc_id      = var.vpc_id

  tags = merge(var.tags, { Name = "${var.name}-etcd" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "client" {
  for_each = toset(var.client_security_group_ids)

  security_group_id            = aws_security_group.etcd.id
  description                  = "etcd clients (Oxbow brokers)"
  ip_protocol                  = "tcp"
  from_port                    = 2379
  to_port                      = 2379
  referenced_security_group_id = each.value
}

resource "aws_vpc_security_group_ingress_rule" "client_self" {
  security_group_id            = aws_security_group.etcd.id
  description                  = "etcdctl on the members themselves (defrag, snapshots)"
  ip_protocol                  = "tcp"
  from_port                    = 2379
  to_port                      = 2379
  referenced_security_group_id = aws_security_group.etcd.id
}

resource "aws_vpc_security_group_ingress_rule" "peer" {
  security_group_id            = aws_security_group.etcd.id
  description                  = "etcd peer traffic (raft)"
  ip_protocol                  = "tcp"
  from_port                    = 2380
  to_port                      = 2380
  referenced_security_group_id = aws_security_group.etcd.id
}

resource "aws_vpc_security_group_egress_rule" "all" {
  #checkov:skip=CKV_AWS_382:Members install etcd from the distribution's mirrors and call S3 and SSM, which have no fixed address range.
  security_group_id = aws_security_group.etcd.id
  description       = "package mirrors, S3 (snapshots), SSM, peers"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

resource "aws_network_interface" "member" {
  count = 3

  subnet_id       = var.subnet_ids[count.index]
  private_ips     = [local.member_ips[count.index]]
  security_groups = [aws_security_group.etcd.id]
  description     = "etcd member ${local.member_names[count.index]}"

  tags = merge(var.tags, { Name = local.member_names[count.index] })
}

# -- storage ---------------------------------------------------------------------------

resource "aws_ebs_volume" "data" {
  #checkov:skip=CKV_AWS_189:Encrypted with the account's default EBS key; pass a CMK through the account default if policy requires one.
  count = 3

  availability_zone = data.aws_subnet.member[count.index].availability_zone
  size              = var.data_volume_size_gib
  type              = "gp3"
  iops              = var.data_volume_iops
  throughput        = var.data_volume_throughput_mibps
  encrypted         = true

  tags = merge(var.tags, { Name = "${local.member_names[count.index]}-data" })
}

# -- identity --------------------------------------------------------------------------

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "etcd" {
  name_prefix        = "${substr(var.name, 0, 24)}-etcd-"
  assume_role_policy = data.aws_iam_policy_document.assume.json

  tags = var.tags
}

data "aws_iam_policy_document" "etcd" {
  statement {
    sid       = "UploadSnapshots"
    actions   = ["s3:PutObject"]
    resources = ["${local.snapshot_arn}/*"]
  }
}

resource "aws_iam_role_policy" "etcd" {
  name   = "etcd-snapshots"
  role   = aws_iam_role.etcd.id
  policy = data.aws_iam_policy_document.etcd.json
}

resource "aws_iam_role_policy_attachment" "ssm" {
  count = var.enable_ssm_session ? 1 : 0

  role       = aws_iam_role.etcd.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "etcd" {
  name_prefix = "${substr(var.name, 0, 24)}-etcd-"
  role        = aws_iam_role.etcd.name

  tags = var.tags
}

# -- members ---------------------------------------------------------------------------

resource "aws_instance" "member" {
  count = 3

  ami                  = data.aws_ssm_parameter.ami.value
  instance_type        = var.instance_type
  iam_instance_profile = aws_iam_instance_profile.etcd.name
  ebs_optimized        = true
  monitoring           = true

  network_interface {
    network_interface_id = aws_network_interface.member[count.index].id
    device_index         = 0
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type = "gp3"
    volume_size = 16
    encrypted   = true
  }

  user_data_replace_on_change = false
  user_data = templatefile("${path.module}/templates/user-data.sh.tftpl", {
    member_name          = local.member_names[count.index]
    member_ip            = local.member_ips[count.index]
    initial_cluster      = local.initial_cluster
    cluster_token        = var.name
    data_volume_id       = aws_ebs_volume.data[count.index].id
    quota_backend_bytes  = var.quota_backend_bytes
    compaction_retention = var.auto_compaction_retention
    defrag_calendar      = format("*-*-* %02d:30:00 UTC", var.defrag_hour_utc + count.index)
    snapshot_calendar    = var.snapshot_interval
    snapshot_url         = "s3://${var.snapshot_bucket_name}/${var.snapshot_prefix}/${local.member_names[count.index]}"
    region               = data.aws_region.current.name
  })

  tags = merge(var.tags, { Name = local.member_names[count.index] })

  lifecycle {
    # A new AMI must not replace a member by surprise: roll members one at a time with
    # `terraform apply -replace='module.etcd.aws_instance.member[0]'`.
    ignore_changes = [ami]
  }
}

resource "aws_volume_attachment" "data" {
  count = 3

  device_name = "/dev/sdf"
  volume_id   = aws_ebs_volume.data[count.index].id
  instance_id = aws_instance.member[count.index].id
}
