# Least-privilege policies for segmirror on one bucket.
#
# shipper: get, put, delete and list only under
#   <key_prefix>/segmirror/v1/<its cluster id>/
#   (s3:PutObject also covers conditional create-if-absent puts and the
#   create/upload-part/complete steps of a multipart upload;
#   s3:AbortMultipartUpload cleans up after an interrupted one). No
#   s3:DeleteObjectVersion: on the versioned bucket a delete only writes a
#   delete marker, so even a stolen shipper credential cannot destroy
#   history before the bucket's noncurrent-version retention.
# applier: get and list only, under the source clusters it mirrors.
# Both: the bucket's KMS key, only through S3 in the bucket's region and only
#   for this bucket's encryption context (the bucket ARN when S3 Bucket Keys
#   are on, the object ARN otherwise).

locals {
  format_root  = var.key_prefix == "" ? "segmirror/v1" : "${var.key_prefix}/segmirror/v1"
  shipper_root = var.shipper_cluster_id == null ? null : "${local.format_root}/${var.shipper_cluster_id}"
  applier_roots = [
    for id in var.applier_source_cluster_ids : "${local.format_root}/${id}"
  ]
  kms_via_s3 = "s3.${var.bucket_region}.amazonaws.com"
}

data "aws_iam_policy_document" "shipper" {
  count = var.shipper_cluster_id == null ? 0 : 1

  statement {
    sid       = "ListOwnPrefix"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${local.shipper_root}/*"]
    }
  }

  statement {
    sid    = "ReadWriteDeleteOwnPrefix"
    effect = "Allow"
    actions = [
      "s3:GetObject",
      "s3:PutObject",
      "s3:DeleteObject",
      "s3:AbortMultipartUpload",
    ]
    resources = ["${var.bucket_arn}/${local.shipper_root}/*"]
  }

  dynamic "statement" {
    for_each = var.shipper_may_tag_objects ? [1] : []

    content {
      sid       = "TagOwnObjects"
      effect    = "Allow"
      actions   = ["s3:PutObjectTagging"]
      resources = ["${var.bucket_arn}/${local.shipper_root}/*"]
    }
  }

  statement {
    sid    = "EncryptDecryptThroughS3"
    effect = "Allow"
    actions = [
      "kms:GenerateDataKey",
      "kms:Decrypt",
    ]
    resources = [var.kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = [local.kms_via_s3]
    }

    condition {
      test     = "StringLike"
      variable = "kms:EncryptionContext:aws:s3:arn"
      values = [
        var.bucket_arn,
        "${var.bucket_arn}/${local.shipper_root}/*",
      ]
    }
  }
}

data "aws_iam_policy_document" "applier" {
  count = length(var.applier_source_cluster_ids) == 0 ? 0 : 1

  statement {
    sid       = "ListSourcePrefixes"
    effect    = "Allow"
    actions   = ["s3:ListBucket"]
    resources = [var.bucket_arn]

    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [for root in local.applier_roots : "${root}/*"]
    }
  }

  statement {
    sid       = "ReadSourcePrefixes"
    effect    = "Allow"
    actions   = ["s3:GetObject"]
    resources = [for root in local.applier_roots : "${var.bucket_arn}/${root}/*"]
  }

  statement {
    sid       = "DecryptThroughS3"
    effect    = "Allow"
    actions   = ["kms:Decrypt"]
    resources = [var.kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = [local.kms_via_s3]
    }

    condition {
      test     = "StringLike"
      variable = "kms:EncryptionContext:aws:s3:arn"
      values = concat(
        [var.bucket_arn],
        [for root in local.applier_roots : "${var.bucket_arn}/${root}/*"],
      )
    }
  }
}

resource "aws_iam_policy" "shipper" {
  count = var.shipper_cluster_id == null ? 0 : 1

  name        = "${var.name_prefix}-shipper"
  description = "segmirror shipper of cluster ${var.shipper_cluster_id}: read, write and delete under ${local.shipper_root}/ only"
  policy      = data.aws_iam_policy_document.shipper[0].json
  tags        = var.tags
}

resource "aws_iam_policy" "applier" {
  count = length(var.applier_source_cluster_ids) == 0 ? 0 : 1

  name        = "${var.name_prefix}-applier"
  description = "segmirror applier: read-only under ${join(", ", [for r in local.applier_roots : "${r}/"])}"
  policy      = data.aws_iam_policy_document.applier[0].json
  tags        = var.tags
}

resource "aws_iam_role_policy_attachment" "shipper" {
  for_each = var.shipper_cluster_id == null ? toset([]) : toset(var.shipper_role_names)

  role       = each.value
  policy_arn = aws_iam_policy.shipper[0].arn
}

resource "aws_iam_role_policy_attachment" "applier" {
  for_each = length(var.applier_source_cluster_ids) == 0 ? toset([]) : toset(var.applier_role_names)

  role       = each.value
  policy_arn = aws_iam_policy.applier[0].arn
}
