# The bucket (graphs, rendered files, publish state, S3 copies of large SSM values, uploads) and the
# DynamoDB table holding one debounce item per cluster.

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV_AWS_18:Server access logging needs a log bucket the caller owns; CloudTrail data events cover audit.
  #checkov:skip=CKV_AWS_144:Cross-region replication is not needed: every object is re-derived from the cloud API on the next reconcile.
  #checkov:skip=CKV_AWS_145:SSE-KMS with a customer key is optional (kms_key_arn); the default is SSE-S3.
  bucket        = var.bucket_name
  bucket_prefix = var.bucket_name == null ? substr("${local.name}-", 0, 37) : null
  force_destroy = var.bucket_force_destroy
  tags          = local.common_tags
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket                  = aws_s3_bucket.this.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id
  versioning_configuration {
    status = "Enabled"
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

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    id     = "expire-noncurrent-versions"
    status = "Enabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
  }

  # generation_retention_days: each generation's graph (graphs/<12 digits>.json) and rendered files
  # (rendered/<12 digits>/) expire that many days after they were written; the prefix ends in "0" so the
  # pointers graphs/latest.json and rendered/latest.json never match. Expiring a current version leaves a
  # delete marker; the rule above removes the old version after noncurrent_version_days.
  dynamic "rule" {
    for_each = var.generation_retention_days == null ? {} : { graphs = "graphs/0", rendered = "rendered/0" }
    content {
      id     = "expire-old-${rule.key}"
      status = "Enabled"
      filter {
        prefix = "${local.key_base}/${rule.value}"
      }
      expiration {
        days = var.generation_retention_days
      }
      abort_incomplete_multipart_upload {
        days_after_initiation = 1
      }
    }
  }

  # the delete markers those expirations leave, once no version is behind them (the bucket is the module's
  # own, so the whole bucket: a marker with nothing behind it is never worth keeping)
  dynamic "rule" {
    for_each = var.generation_retention_days == null ? [] : ["markers"]
    content {
      id     = "remove-expired-delete-markers"
      status = "Enabled"
      filter {}
      expiration {
        expired_object_delete_marker = true
      }
      abort_incomplete_multipart_upload {
        days_after_initiation = 1
      }
    }
  }

  depends_on = [aws_s3_bucket_versioning.this]
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.this.arn, "${aws_s3_bucket.this.arn}/*"]
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
}

resource "aws_s3_bucket_policy" "this" {
  bucket = aws_s3_bucket.this.id
  policy = data.aws_iam_policy_document.bucket.json

  depends_on = [aws_s3_bucket_public_access_block.this]
}

# On-prem collector uploads trigger discover. S3 also sends one s3:TestEvent when this is set up;
# discover drops it.
resource "aws_s3_bucket_notification" "this" {
  count  = local.upload_events ? 1 : 0
  bucket = aws_s3_bucket.this.id

  queue {
    id            = "topocast-uploads"
    queue_arn     = aws_sqs_queue.main["events"].arn
    events        = ["s3:ObjectCreated:*"]
    filter_prefix = local.uploads_key
  }

  depends_on = [aws_sqs_queue.main]
}

resource "aws_dynamodb_table" "debounce" {
  name                        = "${local.name}-debounce"
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "cluster"
  deletion_protection_enabled = var.state_table_deletion_protection

  attribute {
    name = "cluster"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  server_side_encryption {
    enabled     = true
    kms_key_arn = var.kms_key_arn
  }

  tags = local.common_tags
}
