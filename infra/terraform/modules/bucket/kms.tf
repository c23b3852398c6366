# The bucket's key, unless the caller brings one (kms_key_arn). The key
# policy only delegates to IAM in this account: who may use the key is
# decided by IAM policies (modules/iam for the shipper and the applier,
# modules/replication for the replication role), each scoped to this bucket
# through kms:ViaService and the S3 encryption context.
resource "aws_kms_key" "this" {
  count = var.kms_key_arn == "" ? 1 : 0

  description             = "segmirror: SSE-KMS for s3://${var.bucket_name}"
  enable_key_rotation     = true
  deletion_window_in_days = var.kms_key_deletion_window_days
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "EnableIAMPoliciesOfThisAccount"
        Effect    = "Allow"
        Principal = { AWS = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
    ]
  })
  tags = var.tags
}

resource "aws_kms_alias" "this" {
  count = var.kms_key_arn == "" ? 1 : 0

  # Alias names admit [A-Za-z0-9/_-] only: a bucket name may contain dots.
  name          = "alias/segmirror/${replace(var.bucket_name, ".", "-")}"
  target_key_id = aws_kms_key.this[0].key_id
}
