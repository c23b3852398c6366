output "role_arn" {
  description = "ARN of the IAM role S3 assumes to replicate."
  value       = aws_iam_role.replication.arn
}

output "rule_ids" {
  description = "Replication rule id of each replicated prefix (the RuleId dimension of the replication metrics)."
  value       = { for prefix, r in local.rules : prefix => r.id }
}

output "replica_kms_key_arn" {
  description = "The KMS key the replicas are encrypted with."
  value       = var.replica_kms_key_arn
}
