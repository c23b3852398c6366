output "bucket_name" {
  description = "The bucket's name."
  value       = aws_s3_bucket.this.id
  # Replication needs versioning on both buckets: whatever uses the bucket
  # through these outputs waits for it.
  depends_on = [aws_s3_bucket_versioning.this]
}

output "bucket_arn" {
  description = "The bucket's ARN."
  value       = aws_s3_bucket.this.arn
  depends_on  = [aws_s3_bucket_versioning.this]
}

output "key_prefix" {
  description = "The key prefix segmirror uses in this bucket (\"\" for none)."
  value       = var.key_prefix
}

output "format_root" {
  description = "<key_prefix>/segmirror/v1: every cluster's keys are under <format_root>/<cluster-id>/."
  value       = local.format_root
}

output "bucket_url" {
  description = "The bucket URL for segmirror's configuration (bucket = ...): s3://<bucket>[/<key_prefix>]."
  value       = local.bucket_url
}

output "kms_key_arn" {
  description = "ARN of the KMS key that encrypts the bucket (created here or passed in)."
  value       = local.kms_key_arn
}
