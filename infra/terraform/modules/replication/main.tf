# S3 cross-region replication of segmirror's prefixes from a source bucket
# to a bucket in another region, with its IAM role, the replica KMS key
# wiring, replication metrics and alarms. Use the provider of the source
# bucket's region.
#
# What an applier reading the replica must tolerate: S3 replicates objects
# independently and in no particular order, so a manifest or head can land
# before the data objects it names. A missing object is a retry, not an
# error (the applier keeps the partition's state, reports lag and tries again
# on its next poll).
# Replication Time Control bounds how long that lasts (15 minutes for
# 99.99% of objects), on top of the shipper's tail interval.

locals {
  rules = {
    for i, prefix in var.prefixes : prefix => {
      id       = substr("segmirror-${replace(trimsuffix(prefix, "/"), "/", "-")}", 0, 255)
      priority = i
    }
  }
}

data "aws_iam_policy_document" "assume" {
  statement {
    effect  = "Allow"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["s3.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "replication" {
  name               = var.name
  description        = "S3 replication of segmirror prefixes from ${var.source_bucket_name} to ${var.destination_bucket_name}"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "replication" {
  statement {
    sid       = "ReadReplicationConfiguration"
    effect    = "Allow"
    actions   = ["s3:GetReplicationConfiguration", "s3:ListBucket"]
    resources = [var.source_bucket_arn]
  }

  statement {
    sid    = "ReadSourceVersions"
    effect = "Allow"
    actions = [
      "s3:GetObjectVersionForReplication",
      "s3:GetObjectVersionAcl",
      "s3:GetObjectVersionTagging",
    ]
    resources = [for p in var.prefixes : "${var.source_bucket_arn}/${p}*"]
  }

  statement {
    sid    = "WriteReplicas"
    effect = "Allow"
    actions = [
      "s3:ReplicateObject",
      "s3:ReplicateDelete",
      "s3:ReplicateTags",
    ]
    resources = [for p in var.prefixes : "${var.destination_bucket_arn}/${p}*"]
  }

  statement {
    sid       = "DecryptSource"
    effect    = "Allow"
    actions   = ["kms:Decrypt"]
    resources = [var.source_kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${var.source_region}.amazonaws.com"]
    }

    condition {
      test     = "StringLike"
      variable = "kms:EncryptionContext:aws:s3:arn"
      values   = concat([var.source_bucket_arn], [for p in var.prefixes : "${var.source_bucket_arn}/${p}*"])
    }
  }

  statement {
    sid       = "EncryptReplicas"
    effect    = "Allow"
    actions   = ["kms:Encrypt", "kms:GenerateDataKey"]
    resources = [var.replica_kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${var.destination_region}.amazonaws.com"]
    }

    condition {
      test     = "StringLike"
      variable = "kms:EncryptionContext:aws:s3:arn"
      values   = concat([var.destination_bucket_arn], [for p in var.prefixes : "${var.destination_bucket_arn}/${p}*"])
    }
  }
}

resource "aws_iam_policy" "replication" {
  name        = var.name
  description = "S3 replication of segmirror prefixes from ${var.source_bucket_name} to ${var.destination_bucket_name}"
  policy      = data.aws_iam_policy_document.replication.json
  tags        = var.tags
}

resource "aws_iam_role_policy_attachment" "replication" {
  role       = aws_iam_role.replication.name
  policy_arn = aws_iam_policy.replication.arn
}

resource "aws_s3_bucket_replication_configuration" "this" {
  bucket = var.source_bucket_name
  role   = aws_iam_role.replication.arn

  dynamic "rule" {
    for_each = local.rules

    content {
      id       = rule.value.id
      priority = rule.value.priority
      status   = "Enabled"

      filter {
        prefix = rule.key
      }

      delete_marker_replication {
        status = var.replicate_delete_markers ? "Enabled" : "Disabled"
      }

      source_selection_criteria {
        sse_kms_encrypted_objects {
          status = "Enabled"
        }
      }

      destination {
        bucket        = var.destination_bucket_arn
        storage_class = var.storage_class

        encryption_configuration {
          replica_kms_key_id = var.replica_kms_key_arn
        }

        metrics {
          status = "Enabled"

          dynamic "event_threshold" {
            for_each = var.replication_time_control ? [15] : []

            content {
              minutes = event_threshold.value
            }
          }
        }

        dynamic "replication_time" {
          for_each = var.replication_time_control ? [15] : []

          content {
            status = "Enabled"

            time {
              minutes = replication_time.value
            }
          }
        }
      }
    }
  }

  # The role must be able to act before S3 validates the configuration.
  depends_on = [aws_iam_role_policy_attachment.replication]
}

# Replication metrics (published by S3 in the source region once the rule's
# metrics are enabled) and alarms on them.
resource "aws_cloudwatch_metric_alarm" "latency" {
  for_each = local.rules

  alarm_name          = "${var.name}-${each.value.id}-latency"
  alarm_description   = "segmirror: replication of s3://${var.source_bucket_name}/${each.key} to ${var.destination_bucket_name} lags more than ${var.latency_alarm_threshold_seconds} s (the DR mirror's RPO grows by as much)"
  namespace           = "AWS/S3"
  metric_name         = "ReplicationLatency"
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 3
  threshold           = var.latency_alarm_threshold_seconds
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags

  dimensions = {
    SourceBucket      = var.source_bucket_name
    DestinationBucket = var.destination_bucket_name
    RuleId            = each.value.id
  }

  depends_on = [aws_s3_bucket_replication_configuration.this]
}

resource "aws_cloudwatch_metric_alarm" "failed" {
  for_each = local.rules

  alarm_name          = "${var.name}-${each.value.id}-failed"
  alarm_description   = "segmirror: objects under s3://${var.source_bucket_name}/${each.key} failed to replicate to ${var.destination_bucket_name}; the DR applier will wait for them"
  namespace           = "AWS/S3"
  metric_name         = "OperationsFailedReplication"
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = var.alarm_actions
  ok_actions          = var.alarm_actions
  tags                = var.tags

  dimensions = {
    SourceBucket      = var.source_bucket_name
    DestinationBucket = var.destination_bucket_name
    RuleId            = each.value.id
  }

  depends_on = [aws_s3_bucket_replication_configuration.this]
}
