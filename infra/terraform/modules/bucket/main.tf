# The bucket segmirror ships to (or, for the DR bucket, the one it
# replicates into). Everything segmirror writes lives under
# <key_prefix>/segmirror/v1/<cluster-id>/ (manifest::layout):
#
#   .../head/<seq>.json                                             change feed
#   .../topics/<topic>/<topic-id>/<partition>/manifest/<v>.json      manifests
#   .../topics/<topic>/<topic-id>/<partition>/pages/<a>-<b>-<upload>.json  sealed pages (create-only)
#   .../topics/<topic>/<topic-id>/<partition>/data/<...>.batches     shipped batches

data "aws_caller_identity" "current" {}
data "aws_partition" "current" {}

locals {
  # <key_prefix>/segmirror/v1, the root of every cluster's keys.
  format_root = var.key_prefix == "" ? "segmirror/v1" : "${var.key_prefix}/segmirror/v1"
  bucket_url  = var.key_prefix == "" ? "s3://${var.bucket_name}" : "s3://${var.bucket_name}/${var.key_prefix}"
  kms_key_arn = var.kms_key_arn == "" ? aws_kms_key.this[0].arn : var.kms_key_arn
}

resource "aws_s3_bucket" "this" {
  bucket        = var.bucket_name
  force_destroy = var.force_destroy
  tags          = var.tags
}

resource "aws_s3_bucket_ownership_controls" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "this" {
  bucket = aws_s3_bucket.this.id

  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# Versioning: required by cross-region replication, and it turns every
# delete (by the shipper, by a lifecycle expiry, by a stolen credential) into
# a delete marker that can be undone for noncurrent_version_retention_days.
resource "aws_s3_bucket_versioning" "this" {
  bucket = aws_s3_bucket.this.id

  versioning_configuration {
    status = "Enabled"
  }
}

# SSE-KMS by default; segmirror sends no encryption headers. The bucket key
# cuts KMS requests (and their cost) to a few per bucket and hour.
resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = local.kms_key_arn
    }
    bucket_key_enabled = true
  }
}

resource "aws_s3_bucket_logging" "this" {
  count = var.access_log_bucket == "" ? 0 : 1

  bucket        = aws_s3_bucket.this.id
  target_bucket = var.access_log_bucket
  target_prefix = var.access_log_prefix == "" ? "s3-access/${var.bucket_name}/" : var.access_log_prefix
}
