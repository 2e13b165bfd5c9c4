# One network load balancer with two TCP listeners: the Kafka bootstrap and the HTTP API.
# Both forward to every ready broker (health check: HTTP /readyz); the brokers' autoscaling
# group registers its instances in both target groups.
#
# Listener scheme: Kafka clients bootstrap through the load balancer (any broker answers
# Metadata for the whole cluster), then connect to each partition leader at the address it
# advertises: its private IP and the Kafka port. Those are reachable from the VPC and from
# networks routed to it (peering, Transit Gateway, VPN), which is where Kafka clients of a
# private log service run. The HTTP API needs nothing per broker: any broker serves every
# partition (produces are forwarded to the leader), so it is complete through the load
# balancer alone, internal or internet-facing.

resource "aws_security_group" "nlb" {
  name_prefix = "${var.name}-nlb-"
  description = "Oxbow load balancer: Kafka bootstrap and HTTP API from clients"
  vpc_id      = var.vpc_id

  tags = merge(var.tags, { Name = "${var.name}-nlb" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "kafka" {
  for_each = toset(var.client_cidr_blocks)

  security_group_id = aws_security_group.nlb.id
  description       = "Kafka bootstrap"
  ip_protocol       = "tcp"
  from_port         = var.kafka_port
  to_port           = var.kafka_port
  cidr_ipv4         = each.value
}

resource "aws_vpc_security_group_ingress_rule" "http" {
  for_each = toset(var.client_cidr_blocks)

  security_group_id = aws_security_group.nlb.id
  description       = "HTTP API"
  ip_protocol       = "tcp"
  from_port         = var.http_port
  to_port           = var.http_port
  cidr_ipv4         = each.value
}

data "aws_vpc" "this" {
  id = var.vpc_id
}

resource "aws_vpc_security_group_egress_rule" "brokers" {
  for_each = toset([tostring(var.kafka_port), tostring(var.http_port)])

  security_group_id = aws_security_group.nlb.id
  description       = "to the brokers (traffic and health checks)"
  ip_protocol       = "tcp"
  from_port         = tonumber(each.value)
  to_port           = tonumber(each.value)
  cidr_ipv4         = data.aws_vpc.this.cidr_block
}

resource "aws_lb" "this" {
  #checkov:skip=CKV_AWS_91:NLB access logs cover TLS listeners only; these are TCP (TLS, when on, is end to end to the brokers).
  #checkov:skip=CKV2_AWS_28:WAF does not attach to network load balancers.
  #checkov:skip=CKV_AWS_152:Off by default on purpose (var.cross_zone): each zone's node sends to its own zone's brokers, so no byte crosses a zone (billed per GB); any broker answers bootstrap.
  name                             = substr("${var.name}-oxbow", 0, 32)
  load_balancer_type               = "network"
  internal                         = var.internal
  subnets                          = var.subnet_ids
  security_groups                  = [aws_security_group.nlb.id]
  enable_cross_zone_load_balancing = var.cross_zone
  enable_deletion_protection       = var.deletion_protection

  tags = var.tags
}

resource "aws_lb_target_group" "kafka" {
  name_prefix = "kafka-"
  port        = var.kafka_port
  protocol    = "TCP"
  vpc_id      = var.vpc_id
  target_type = "instance"
  # A broker leaving gets its SIGTERM handoff time before connections are cut.
  deregistration_delay = 30

  health_check {
    protocol            = "HTTP"
    port                = tostring(var.http_port)
    path                = "/readyz"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }

  tags = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_target_group" "http" {
  name_prefix          = "http-"
  port                 = var.http_port
  protocol             = "TCP"
  vpc_id               = var.vpc_id
  target_type          = "instance"
  deregistration_delay = 30

  health_check {
    protocol            = "HTTP"
    port                = tostring(var.http_port)
    path                = "/readyz"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }

  tags = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_listener" "kafka" {
  #checkov:skip=CKV_AWS_2:TCP passthrough: brokers terminate TLS themselves (SSL/SASL_SSL listeners) when it is configured.
  #checkov:skip=CKV_AWS_103:TCP passthrough, no TLS policy at the load balancer.
  load_balancer_arn = aws_lb.this.arn
  port              = var.kafka_port
  protocol          = "TCP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.kafka.arn
  }
}

resource "aws_lb_listener" "http" {
  #checkov:skip=CKV_AWS_2:TCP passthrough: brokers serve HTTPS themselves (--http-tls) when it is configured.
  #checkov:skip=CKV_AWS_103:TCP passthrough, no TLS policy at the load balancer.
  load_balancer_arn = aws_lb.this.arn
  port              = var.http_port
  protocol          = "TCP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.http.arn
  }
}
