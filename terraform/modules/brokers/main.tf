# Brokers: a launch template and an autoscaling group over three zones. Instances hold no
# state that matters (the WAL is replicated until it is in S3), so the group may replace,
# add and remove them freely, provided removal goes through the broker's graceful stop:
# a termination lifecycle hook holds each terminating instance until oxbow-lifecycle (on
# the instance) has stopped the broker (SIGTERM: partitions handed over) and completed the
# action. Scaling follows the mean per-broker ingest rate, published by oxbow-metrics.

data "aws_partition" "current" {}

data "aws_region" "current" {}

data "aws_caller_identity" "current" {}

data "aws_ssm_parameter" "ami" {
  name = var.ami_ssm_parameter
}

locals {
  asg_name            = "${var.name}-brokers"
  lifecycle_hook_name = "oxbow-handoff"
  partition           = data.aws_partition.current.partition
  region              = data.aws_region.current.name
  bucket_prefix_arn   = "${var.bucket_arn}/${var.data_prefix}"
  asg_arn             = "arn:${local.partition}:autoscaling:${local.region}:${data.aws_caller_identity.current.account_id}:autoScalingGroup:*:autoScalingGroupName/${local.asg_name}"
  artifact_object_arn = startswith(var.oxbow_artifact_url, "s3://") ? "arn:${local.partition}:s3:::${trimprefix(var.oxbow_artifact_url, "s3://")}" : null

  deploy_env = {
    VPC_CIDR             = var.vpc_cidr_block
    METADATA             = var.metadata_url
    OBJECT_STORE         = var.object_store_url
    KAFKA_PORT           = var.kafka_port
    HTTP_PORT            = var.http_port
    INTERNAL_PORT        = var.internal_port
    CACHE_DIR            = "/var/lib/oxbow/cache"
    INTERNAL_SECRET_FILE = "/etc/oxbow/internal.secret"
    EXTRA_ENV_FILE       = "/etc/oxbow/extra.env"
    ASG_NAME             = local.asg_name
    LIFECYCLE_HOOK_NAME  = local.lifecycle_hook_name
    METRICS_NAMESPACE    = var.metrics_namespace
  }
}

# -- the cluster's internal-port secret ----------------------------------------------------
# Brokers prove it to each other before any WAL crosses the internal port. It is in the
# Terraform state (as every generated secret is): keep the state encrypted.

resource "random_password" "internal_secret" {
  length  = 64
  special = false
}

resource "aws_ssm_parameter" "internal_secret" {
  #checkov:skip=CKV_AWS_337:Encrypted with the AWS-managed SSM key; a customer key adds a charge and key policy for a secret only the broker role reads.
  name        = "/oxbow/${var.name}/internal-auth-secret"
  description = "Oxbow internal-port secret (--internal-auth-secret-file) of ${var.name}"
  type        = "SecureString"
  value       = random_password.internal_secret.result

  tags = var.tags
}

# -- network -------------------------------------------------------------------------------

resource "aws_security_group" "broker" {
  name_prefix = "${var.name}-broker-"
  description = "Oxbow brokers: Kafka and HTTP from clients and the load balancer, the internal port between brokers"
  vpc_id      = var.vpc_id

  tags = merge(var.tags, { Name = "${var.name}-broker" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "kafka_clients" {
  for_each = toset(var.client_cidr_blocks)

  security_group_id = aws_security_group.broker.id
  description       = "Kafka clients (advertised private addresses)"
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "http_clients" {
  for_each = toset(var.client_cidr_blocks)

  security_group_id = aws_security_group.broker.id
  description       = "HTTP API clients"
  ip_protocol       = "tcp"
  from_port         = var.http_port
  to_port           = var.http_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "kafka_lb" {
  for_each = toset(var.load_balancer_security_group_ids)

  security_group_id            = aws_security_group.broker.id
  description                  = "Kafka bootstrap through the load balancer"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = each.value
}

resource "aws_vpc_security_group_ingress_rule" "http_lb" {
  for_each = toset(var.load_balancer_security_group_ids)

  security_group_id            = aws_security_group.broker.id
  description                  = "HTTP API and /readyz health checks through the load balancer"
  ip_protocol                  = "tcp"
  from_port                    = var.http_port
  to_port                      = var.http_port
  referenced_security_group_id = each.value
}

resource "aws_vpc_security_group_ingress_rule" "internal" {
  security_group_id            = aws_security_group.broker.id
  description                  = "WAL replication and tail recovery between brokers"
  ip_protocol                  = "tcp"
  from_port                    = var.internal_port
  to_port                      = var.internal_port
  referenced_security_group_id = aws_security_group.broker.id
}

resource "aws_vpc_security_group_ingress_rule" "kafka_peers" {
  security_group_id            = aws_security_group.broker.id
  description                  = "Brokers' own Kafka client (controller probes, forwarded HTTP produces)"
  ip_protocol                  = "tcp"
  from_port                    = var.kafka_port
  to_port                      = var.kafka_port
  referenced_security_group_id = aws_security_group.broker.id
}

resource "aws_vpc_security_group_egress_rule" "all" {
  #checkov:skip=CKV_AWS_382:Brokers call AWS APIs (Auto Scaling, CloudWatch, SSM) through NAT and fetch packages; those have no fixed address range. S3 goes through the gateway endpoint.
  security_group_id = aws_security_group.broker.id
  description       = "etcd, peers, S3 endpoint, AWS APIs"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}

# -- identity: what a broker may do, and nothing else --------------------------------------

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "broker" {
  name_prefix        = "${substr(var.name, 0, 24)}-broker-"
  assume_role_policy = data.aws_iam_policy_document.assume.json

  tags = var.tags
}

data "aws_iam_policy_document" "broker" {
  statement {
    sid       = "LogObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
    resources = ["${local.bucket_prefix_arn}/*"]
  }

  # Listing (the orphan sweep, compaction) only under the data prefix.
  statement {
    sid       = "ListLogObjects"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [var.data_prefix, "${var.data_prefix}/*"]
    }
  }

  dynamic "statement" {
    for_each = length(var.express_bucket_arns) > 0 ? [1] : []

    content {
      sid       = "ExpressSessions"
      actions   = ["s3express:CreateSession"]
      resources = var.express_bucket_arns
    }
  }

  dynamic "statement" {
    for_each = local.artifact_object_arn == null ? [] : [1]

    content {
      sid       = "DownloadBinary"
      actions   = ["s3:GetObject"]
      resources = [local.artifact_object_arn]
    }
  }

  statement {
    sid       = "ReadInternalSecret"
    actions   = ["ssm:GetParameter"]
    resources = [aws_ssm_parameter.internal_secret.arn]
  }

  # The scale-in handshake, on this group only.
  statement {
    sid       = "CompleteOwnLifecycleActions"
    actions   = ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"]
    resources = [local.asg_arn]
  }

  # PutMetricData has no resource-level permissions; the namespace condition confines it.
  statement {
    sid       = "PublishIngestMetric"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]

    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metrics_namespace]
    }
  }
}

resource "aws_iam_role_policy" "broker" {
  name   = "oxbow-broker"
  role   = aws_iam_role.broker.id
  policy = data.aws_iam_policy_document.broker.json
}

resource "aws_iam_role_policy_attachment" "ssm" {
  count = var.enable_ssm_session ? 1 : 0

  role       = aws_iam_role.broker.name
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "broker" {
  name_prefix = "${substr(var.name, 0, 24)}-broker-"
  role        = aws_iam_role.broker.name

  tags = var.tags
}

# -- instances -------------------------------------------------------------------------------

resource "aws_launch_template" "broker" {
  name_prefix   = "${var.name}-broker-"
  description   = "Oxbow broker"
  image_id      = data.aws_ssm_parameter.ami.value
  instance_type = var.instance_type
  ebs_optimized = true

  iam_instance_profile {
    arn = aws_iam_instance_profile.broker.arn
  }

  vpc_security_group_ids = [aws_security_group.broker.id]

  # IMDSv2 only, one hop: the broker and its scripts run on the host, not in containers.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
    instance_metadata_tags      = "disabled"
  }

  monitoring {
    enabled = true
  }

  block_device_mappings {
    device_name = "/dev/sda1"

    ebs {
      volume_type           = "gp3"
      volume_size           = var.root_volume_size_gib
      encrypted             = true
      delete_on_termination = true
    }
  }

  user_data = base64encode(templatefile("${path.module}/templates/user-data.sh.tftpl", {
    region             = local.region
    artifact_url       = var.oxbow_artifact_url
    artifact_sha256    = var.oxbow_artifact_sha256
    secret_parameter   = aws_ssm_parameter.internal_secret.name
    deploy_env         = join("\n", [for k, v in local.deploy_env : "${k}=${v}"])
    extra_env          = join("\n", [for k, v in var.extra_environment : "${k}=${v}"])
    oxbow_env_sh       = file("${path.module}/files/oxbow-env.sh")
    oxbow_lifecycle_sh = file("${path.module}/files/oxbow-lifecycle.sh")
    oxbow_metrics_sh   = file("${path.module}/files/oxbow-metrics.sh")
    oxbow_service      = file("${path.module}/../../../packaging/systemd/oxbow.service")
    lifecycle_service  = file("${path.module}/files/oxbow-lifecycle.service")
    metrics_service    = file("${path.module}/files/oxbow-metrics.service")
  }))

  tag_specifications {
    resource_type = "instance"
    tags          = merge(var.tags, { Name = "${var.name}-broker" })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(var.tags, { Name = "${var.name}-broker" })
  }

  tags = var.tags
}

resource "aws_autoscaling_group" "broker" {
  name                      = local.asg_name
  vpc_zone_identifier       = var.subnet_ids
  min_size                  = var.min_size
  max_size                  = var.max_size
  desired_capacity          = var.desired_capacity
  default_instance_warmup   = var.instance_warmup_seconds
  target_group_arns         = var.target_group_arns
  health_check_type         = "EC2"
  health_check_grace_period = var.instance_warmup_seconds
  # Not ELB health: /readyz is 503 while a broker legitimately waits (for WAL replicas
  # after a whole-cluster restart); replacing it then would make things worse. The load
  # balancer still routes only to ready brokers.
  enabled_metrics = ["GroupDesiredCapacity", "GroupInServiceInstances", "GroupTerminatingInstances", "GroupPendingInstances"]

  launch_template {
    id      = aws_launch_template.broker.id
    version = aws_launch_template.broker.latest_version
  }

  # Scale-in (and every other termination: rebalancing, instance refresh) waits for the
  # broker's handoff; see files/oxbow-lifecycle.sh.
  initial_lifecycle_hook {
    name                 = local.lifecycle_hook_name
    lifecycle_transition = "autoscaling:EC2_INSTANCE_TERMINATING"
    heartbeat_timeout    = var.handoff_timeout_seconds
    default_result       = "CONTINUE"
  }

  # A new launch template (binary, settings) rolls through the group one broker at a time,
  # each leaving through the lifecycle hook.
  instance_refresh {
    strategy = "Rolling"

    preferences {
      min_healthy_percentage = 66
      instance_warmup        = var.instance_warmup_seconds
    }
  }

  dynamic "tag" {
    for_each = merge(var.tags, { Name = "${var.name}-broker" })

    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    ignore_changes = [desired_capacity]
  }
}

# -- scaling ---------------------------------------------------------------------------------

# Mean per-broker ingest. oxbow_appended_bytes_total counts what a broker appends as a
# partition leader: the work that grows with leadership (WAL writes, two cross-zone replica
# streams, seals and PUTs) and that a new broker takes its share of within seconds.
resource "aws_autoscaling_policy" "ingest" {
  name                   = "oxbow-ingest-per-broker"
  autoscaling_group_name = aws_autoscaling_group.broker.name
  policy_type            = "TargetTrackingScaling"

  target_tracking_configuration {
    target_value = var.target_appended_bytes_per_second

    customized_metric_specification {
      namespace   = var.metrics_namespace
      metric_name = "AppendedBytesPerSecond"
      statistic   = "Average"
      unit        = "Bytes/Second"

      metric_dimension {
        name  = "AutoScalingGroupName"
        value = aws_autoscaling_group.broker.name
      }
    }
  }
}

resource "aws_autoscaling_policy" "cpu" {
  count = var.cpu_target_percent == null ? 0 : 1

  name                   = "oxbow-cpu"
  autoscaling_group_name = aws_autoscaling_group.broker.name
  policy_type            = "TargetTrackingScaling"

  target_tracking_configuration {
    target_value = var.cpu_target_percent

    predefined_metric_specification {
      predefined_metric_type = "ASGAverageCPUUtilization"
    }
  }
}
