# The services' configuration files, rendered from templates/ with
# templatefile(). The variables each template may use are exactly the keys
# of these maps (infra/tests checks that and renders them like Terraform).
locals {
  # Region A: shipper beside the source broker.
  shipper_config = {
    log_dirs     = var.primary_log_dirs
    bucket       = module.primary_bucket.bucket_url
    cluster_id   = var.primary_cluster_id
    metrics_addr = var.shipper_metrics_addr
  }

  # Region B: applier keeping the mirror, reading the DR bucket (replica).
  applier_config = {
    log_dir              = var.dr_log_dir
    bucket               = module.dr_bucket.bucket_url
    source_cluster_id    = var.primary_cluster_id
    cluster_id           = var.dr_cluster_id
    topics               = var.topics
    exclude              = var.exclude
    poll_interval_ms     = var.poll_interval_ms
    download_concurrency = var.download_concurrency
    tiered_topics        = var.dr_tiered_topics
    metrics_addr         = var.applier_metrics_addr
  }

  # Failback: the roles swap. The applier writes the first primary log dir.
  # (Plain object literals, no merge(): infra/tests evaluates these maps.)
  failback_shipper_config = {
    log_dirs     = [var.dr_log_dir]
    bucket       = module.dr_bucket.bucket_url
    cluster_id   = var.dr_cluster_id
    metrics_addr = var.shipper_metrics_addr
  }

  failback_applier_config = {
    log_dir              = var.primary_log_dirs[0]
    bucket               = module.primary_bucket.bucket_url
    source_cluster_id    = var.dr_cluster_id
    cluster_id           = var.primary_cluster_id
    topics               = var.topics
    exclude              = var.exclude
    poll_interval_ms     = var.poll_interval_ms
    download_concurrency = var.download_concurrency
    tiered_topics        = var.primary_tiered_topics
    metrics_addr         = var.applier_metrics_addr
  }

  # What `shipper doctor` and `applier doctor` check the buckets against
  # (the primary-to-DR direction; modules/replication replicates delete
  # markers by default, and Replication Time Control bounds the delay).
  doctor_expectations_config = {
    cluster_ids             = [var.primary_cluster_id]
    source_bucket           = module.primary_bucket.bucket_url
    source_region           = var.primary_region
    source_kms_key_arn      = module.primary_bucket.kms_key_arn
    destination_bucket      = module.dr_bucket.bucket_url
    destination_region      = var.dr_region
    destination_kms_key_arn = module.dr_bucket.kms_key_arn
  }
}

output "shipper_toml" {
  description = "shipper.toml for the source broker's host in the primary region (/etc/segmirror/shipper.toml)."
  value       = templatefile("${path.module}/templates/shipper.toml.tftpl", local.shipper_config)
}

output "applier_toml" {
  description = "applier.toml for the DR host (/etc/segmirror/applier.toml)."
  value       = templatefile("${path.module}/templates/applier.toml.tftpl", local.applier_config)
}

output "failback_shipper_toml" {
  description = "shipper.toml for the DR host after a failover (null without enable_failback)."
  value       = var.enable_failback ? templatefile("${path.module}/templates/shipper.toml.tftpl", local.failback_shipper_config) : null
}

output "failback_applier_toml" {
  description = "applier.toml for the primary host to mirror back after a failover (null without enable_failback)."
  value       = var.enable_failback ? templatefile("${path.module}/templates/applier.toml.tftpl", local.failback_applier_config) : null
}

output "doctor_expectations" {
  description = "Expectations for `shipper doctor --expect` and `applier doctor --expect` (terraform output -raw doctor_expectations > doctor.toml)."
  value       = templatefile("${path.module}/templates/doctor.toml.tftpl", local.doctor_expectations_config)
}

output "primary_bucket" {
  description = "The primary bucket: name, ARN, segmirror URL and KMS key."
  value = {
    name        = module.primary_bucket.bucket_name
    arn         = module.primary_bucket.bucket_arn
    url         = module.primary_bucket.bucket_url
    kms_key_arn = module.primary_bucket.kms_key_arn
  }
}

output "dr_bucket" {
  description = "The DR bucket: name, ARN, segmirror URL and KMS key (also the replica key)."
  value = {
    name        = module.dr_bucket.bucket_name
    arn         = module.dr_bucket.bucket_arn
    url         = module.dr_bucket.bucket_url
    kms_key_arn = module.dr_bucket.kms_key_arn
  }
}

output "instance_profiles" {
  description = "Instance profiles of the hosts (failback ones null without enable_failback)."
  value = {
    shipper_primary = aws_iam_instance_profile.shipper_primary.name
    applier_dr      = aws_iam_instance_profile.applier_dr.name
    shipper_dr      = one(aws_iam_instance_profile.shipper_dr[*].name)
    applier_primary = one(aws_iam_instance_profile.applier_primary[*].name)
  }
}

output "role_arns" {
  description = "IAM roles of the services (failback ones null without enable_failback)."
  value = {
    shipper_primary = aws_iam_role.shipper_primary.arn
    applier_dr      = aws_iam_role.applier_dr.arn
    shipper_dr      = one(aws_iam_role.shipper_dr[*].arn)
    applier_primary = one(aws_iam_role.applier_primary[*].arn)
  }
}

output "replication_rule_ids" {
  description = "Replication rule ids per replicated prefix (RuleId dimension of the S3 replication metrics)."
  value = {
    to_dr      = module.replication_to_dr.rule_ids
    to_primary = one(module.replication_to_primary[*].rule_ids)
  }
}
