output "shipper_policy_json" {
  description = "The shipper's policy document (null without shipper_cluster_id)."
  value       = var.shipper_cluster_id == null ? null : data.aws_iam_policy_document.shipper[0].json
}

output "shipper_policy_arn" {
  description = "ARN of the shipper's managed policy (null without shipper_cluster_id)."
  value       = var.shipper_cluster_id == null ? null : aws_iam_policy.shipper[0].arn
}

output "shipper_root" {
  description = "The only key prefix the shipper may touch: <key_prefix>/segmirror/v1/<cluster-id>."
  value       = local.shipper_root
}

output "applier_policy_json" {
  description = "The applier's policy document (null without applier_source_cluster_ids)."
  value       = length(var.applier_source_cluster_ids) == 0 ? null : data.aws_iam_policy_document.applier[0].json
}

output "applier_policy_arn" {
  description = "ARN of the applier's managed policy (null without applier_source_cluster_ids)."
  value       = length(var.applier_source_cluster_ids) == 0 ? null : aws_iam_policy.applier[0].arn
}

output "applier_roots" {
  description = "The key prefixes the applier may read."
  value       = local.applier_roots
}
