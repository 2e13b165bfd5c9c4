# The system of record: one S3 bucket. Brokers write every object once (create-only PUTs)
# and never overwrite, so versioning would only keep what compaction and retention delete;
# it is off. Objects are encrypted, the bucket is private, and its policy lets only the
# broker role touch the data prefix (and the etcd members the snapshot prefix), over TLS.

data "aws_partition" "current" {}

locals {
  bucket_arn   = "arn:${data.aws_partition.current.partition}:s3:::${var.bucket_name}"
  object_users = distinct(concat(var.broker_role_arns, var.snapshot_writer_role_arns, var.admin_role_arns))
}

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV_AWS_18:Server access logs of a bucket taking a PUT per broker every 250 ms cost more than they show; use CloudTrail data events when an audit needs them.
  #checkov:skip=CKV_AWS_144:Cross-region replication copies objects without the etcd catalog that gives them meaning; disaster recovery across regions is out of scope.
  #checkov:skip=CKV_AWS_21:Objects are written once (create-only) and never overwritten; versioning would keep every object compaction and retention delete.
  #checkov:skip=CKV2_AWS_62:No consumer of object events: brokers learn of new objects through etcd.
  #checkov:skip=CKV_AWS_145:SSE-S3 by default (no per-request KMS charge); set kms_key_arn for SSE-KMS.
  bucket        = var.bucket_name
  force_destroy = var.force_destroy

  tags = var.tags
}

resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id

  versioning_configuration {
    status = "Disabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = var.kms_key_arn != null
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket = aws_s3_bucket.this.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  # A broker that dies mid-upload leaves parts that are billed until aborted.
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_days
    }
  }

  # The data prefix has no expiration rule: retention is Oxbow's (per topic, in etcd);
  # an S3 rule would delete objects the catalog still names.
  rule {
    id     = "expire-etcd-snapshots"
    status = "Enabled"

    filter {
      prefix = "${var.snapshot_prefix}/"
    }

    expiration {
      days = var.snapshot_retention_days
    }
  }
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [local.bucket_arn, "${local.bucket_arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  # Object reads and writes by anyone but the brokers, the snapshot writers and the named
  # admins are denied, whatever their IAM policies say. Bucket management (this policy,
  # the lifecycle) stays with the account's administrators.
  statement {
    sid       = "DenyObjectAccessToOthers"
    effect    = "Deny"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListBucket", "s3:ListMultipartUploadParts"]
    resources = [local.bucket_arn, "${local.bucket_arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "ArnNotLike"
      variable = "aws:PrincipalArn"
      values   = local.object_users
    }
  }

  # The brokers' own access: only under the data prefix.
  statement {
    sid       = "BrokersReadWriteData"
    effect    = "Allow"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
    resources = ["${local.bucket_arn}/${var.data_prefix}/*"]

    principals {
      type        = "AWS"
      identifiers = var.broker_role_arns
    }
  }

  statement {
    sid       = "BrokersListData"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]

    principals {
      type        = "AWS"
      identifiers = var.broker_role_arns
    }

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.data_prefix}/*"]
    }
  }

  dynamic "statement" {
    for_each = length(var.snapshot_writer_role_arns) > 0 ? [1] : []

    content {
      sid       = "EtcdWritesSnapshots"
      effect    = "Allow"
      actions   = ["s3:PutObject", "s3:GetObject"]
      resources = ["${local.bucket_arn}/${var.snapshot_prefix}/*"]

      principals {
        type        = "AWS"
        identifiers = var.snapshot_writer_role_arns
      }
    }
  }
}

resource "aws_s3_bucket_policy" "this" {
  bucket = aws_s3_bucket.this.id
  policy = data.aws_iam_policy_document.bucket.json

  # The public access block first, so this policy is never evaluated as possibly public.
  depends_on = [aws_s3_bucket_public_access_block.this]
}

# Optional: one S3 Express One Zone directory bucket per zone, for brokers that run with
# --durability direct and want single-digit-millisecond PUTs (each zone's brokers use the
# bucket of their own zone). Oxbow has not been run against S3 Express yet.
resource "aws_s3_directory_bucket" "express" {
  for_each = toset(var.express_one_zone_az_ids)

  bucket        = "${var.bucket_name}--${each.value}--x-s3"
  force_destroy = var.force_destroy

  location {
    name = each.value
    type = "AvailabilityZone"
  }
}
