# The lake's bucket: private, encrypted, versioned (by default), with lifecycle rules per prefix.
# Which prefix holds what is lakeflow/lake/layout.py; docs/security.md explains the choices.

locals {
  root = "${var.prefix}/"

  # Noncurrent versions exist only after an overwrite or a delete. Objects written once
  # (trajectories, commits, batches) get a long recovery window; weights and optimizer
  # checkpoints a short one, so that gc frees storage; churning objects the shortest.
  noncurrent_days = {
    "trajectories/" = var.history_noncurrent_days
    "_commits/"     = var.history_noncurrent_days
    "batches/"      = var.history_noncurrent_days
    "weights/"      = var.weights_noncurrent_days
    "checkpoints/"  = var.weights_noncurrent_days
    "tasks/"        = var.churn_noncurrent_days
    "stats/"        = var.churn_noncurrent_days
    "catalog/"      = var.churn_noncurrent_days
    "_dataflow/"    = var.churn_noncurrent_days
    "_quarantine/"  = var.churn_noncurrent_days
  }
  # One rule per prefix (rules with the same action must not overlap).
  lifecycle_rules = [for p, days in local.noncurrent_days : {
    id              = trimsuffix(replace(p, "_", ""), "/")
    prefix          = "${local.root}${p}"
    noncurrent_days = var.versioning ? days : null
    expire_days     = p == "_quarantine/" ? var.quarantine_days : null
    transition      = p == "trajectories/" ? var.trajectories_transition : null
  }]
}

resource "aws_s3_bucket" "lake" {
  bucket        = var.bucket
  force_destroy = var.force_destroy
  tags          = var.tags
}

resource "aws_s3_bucket_public_access_block" "lake" {
  bucket                  = aws_s3_bucket.lake.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "lake" {
  bucket = aws_s3_bucket.lake.id
  rule {
    object_ownership = "BucketOwnerEnforced" # ACLs off: access is IAM only
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "lake" {
  bucket = aws_s3_bucket.lake.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = var.kms_key_arn != null
  }
}

resource "aws_s3_bucket_versioning" "lake" {
  bucket = aws_s3_bucket.lake.id
  versioning_configuration {
    status = var.versioning ? "Enabled" : "Suspended"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "lake" {
  count      = var.lifecycle_rules ? 1 : 0
  bucket     = aws_s3_bucket.lake.id
  depends_on = [aws_s3_bucket_versioning.lake]

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {
      prefix = local.root
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_multipart_days
    }
  }

  dynamic "rule" {
    for_each = [for r in local.lifecycle_rules : r if r.noncurrent_days != null || r.expire_days != null || r.transition != null]
    content {
      id     = rule.value.id
      status = "Enabled"
      filter {
        prefix = rule.value.prefix
      }
      dynamic "expiration" {
        for_each = rule.value.expire_days == null ? [] : [rule.value.expire_days]
        content {
          days = expiration.value
        }
      }
      dynamic "noncurrent_version_expiration" {
        for_each = rule.value.noncurrent_days == null ? [] : [rule.value.noncurrent_days]
        content {
          noncurrent_days = noncurrent_version_expiration.value
        }
      }
      dynamic "transition" {
        for_each = rule.value.transition == null ? [] : [rule.value.transition]
        content {
          days          = transition.value.days
          storage_class = transition.value.storage_class
        }
      }
    }
  }
}

resource "aws_s3_bucket_policy" "tls_only" {
  count  = var.require_tls ? 1 : 0
  bucket = aws_s3_bucket.lake.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "DenyWithoutTLS"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = [aws_s3_bucket.lake.arn, "${aws_s3_bucket.lake.arn}/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
  })
  depends_on = [aws_s3_bucket_public_access_block.lake]
}
