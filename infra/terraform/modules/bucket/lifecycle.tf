# Lifecycle. What may expire, and why nothing else does:
#
# - Incomplete multipart uploads (whole bucket): a manifest is committed only
#   after the objects it names are complete, so an upload still incomplete
#   after N days belongs to a crashed or fenced shipper and is never read.
#
# - Noncurrent versions and expired delete markers (under
#   <key_prefix>/segmirror/v1/): segmirror writes every key once
#   (create-if-absent) and reads only current versions, so a noncurrent
#   version exists only after a delete: a data object the shipper removed
#   below the source's log start, a head pruned from the change feed, or a
#   data expiry below. Removing it after the undo window cannot break a
#   mirror.
#
# - Current data objects (opt-in, data_expiration_days): never by prefix
#   alone. S3 filters take a literal key prefix, a tag or a size, and data
#   objects sit at .../topics/<topic>/<topic-id>/<partition>/data/, below
#   per-topic directories that also hold the manifests and pages. A prefix
#   rule that reaches the data would reach the manifests too, and an expired
#   latest manifest or head silently stops the mirror of an idle partition.
#   So the rule requires an object tag that only data objects carry, and it
#   is off by default: an expired object that a manifest still names cannot
#   be applied by a lagging or bootstrapping applier. The intended retention
#   path is the shipper following the source's log start and deleting what
#   falls below it; this rule is a backstop for deployments that leave that
#   to S3.
resource "aws_s3_bucket_lifecycle_configuration" "this" {
  bucket = aws_s3_bucket.this.id

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"

    filter {}

    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_upload_days
    }
  }

  rule {
    id     = "segmirror-noncurrent-versions"
    status = "Enabled"

    filter {
      prefix = "${local.format_root}/"
    }

    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_retention_days
    }

    expiration {
      expired_object_delete_marker = true
    }
  }

  dynamic "rule" {
    for_each = var.data_expiration_days == null ? [] : [var.data_expiration_days]

    content {
      id     = "segmirror-expire-tagged-data-objects"
      status = "Enabled"

      filter {
        and {
          prefix = "${local.format_root}/"
          tags   = { (var.data_object_tag.key) = var.data_object_tag.value }
        }
      }

      expiration {
        days = rule.value
      }
    }
  }

  # Noncurrent-version rules are meant for a versioned bucket: configure
  # versioning first (as the provider's documentation recommends).
  depends_on = [aws_s3_bucket_versioning.this]
}
