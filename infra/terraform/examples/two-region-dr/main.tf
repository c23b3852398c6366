# Two regions wired for disaster recovery.
#
#   region A (primary)                          region B (DR)
#   source broker + shipper ──▶ primary bucket ══CRR══▶ DR bucket ──▶ applier + mirror
#                               <prefix>/segmirror/v1/<primary_cluster_id>/
#
# With enable_failback, the way back is provisioned too: after a failover the
# DR cluster ships under its own id into the DR bucket, S3 replicates that
# prefix to the primary bucket, and an applier in region A mirrors it back.
#
#   applier (failback) ◀── primary bucket ◀══CRR══ DR bucket ◀── shipper (B)
#                          <prefix>/segmirror/v1/<dr_cluster_id>/
#
# Each direction replicates only its own cluster's prefix, so replicas are
# never replicated back.

module "primary_bucket" {
  source    = "../../modules/bucket"
  providers = { aws = aws.primary }

  bucket_name                            = var.primary_bucket_name
  key_prefix                             = var.key_prefix
  abort_incomplete_multipart_upload_days = var.abort_incomplete_multipart_upload_days
  noncurrent_version_retention_days      = var.noncurrent_version_retention_days
  data_expiration_days                   = var.data_expiration_days
  access_log_bucket                      = var.access_log_bucket_primary
}

module "dr_bucket" {
  source    = "../../modules/bucket"
  providers = { aws = aws.dr }

  bucket_name                            = var.dr_bucket_name
  key_prefix                             = var.key_prefix
  abort_incomplete_multipart_upload_days = var.abort_incomplete_multipart_upload_days
  noncurrent_version_retention_days      = var.noncurrent_version_retention_days
  data_expiration_days                   = var.data_expiration_days
  access_log_bucket                      = var.access_log_bucket_dr
}

locals {
  # <key_prefix>/segmirror/v1/<cluster-id>/ of each side (manifest::layout).
  primary_cluster_prefix = "${module.primary_bucket.format_root}/${var.primary_cluster_id}/"
  dr_cluster_prefix      = "${module.dr_bucket.format_root}/${var.dr_cluster_id}/"
}

# A -> B: the primary cluster's objects, re-encrypted with the DR bucket's
# key (the replica key), so the DR applier needs that one key only.
module "replication_to_dr" {
  source    = "../../modules/replication"
  providers = { aws = aws.primary }

  name                     = "${var.name}-${var.primary_region}-to-${var.dr_region}"
  source_bucket_name       = module.primary_bucket.bucket_name
  source_bucket_arn        = module.primary_bucket.bucket_arn
  source_region            = var.primary_region
  source_kms_key_arn       = module.primary_bucket.kms_key_arn
  destination_bucket_name  = module.dr_bucket.bucket_name
  destination_bucket_arn   = module.dr_bucket.bucket_arn
  destination_region       = var.dr_region
  replica_kms_key_arn      = module.dr_bucket.kms_key_arn
  prefixes                 = [local.primary_cluster_prefix]
  replication_time_control = var.replication_time_control
  alarm_actions            = var.alarm_actions_primary
}

# B -> A (failback): the DR cluster's objects, once it ships after a failover.
module "replication_to_primary" {
  source    = "../../modules/replication"
  providers = { aws = aws.dr }
  count     = var.enable_failback ? 1 : 0

  name                     = "${var.name}-${var.dr_region}-to-${var.primary_region}"
  source_bucket_name       = module.dr_bucket.bucket_name
  source_bucket_arn        = module.dr_bucket.bucket_arn
  source_region            = var.dr_region
  source_kms_key_arn       = module.dr_bucket.kms_key_arn
  destination_bucket_name  = module.primary_bucket.bucket_name
  destination_bucket_arn   = module.primary_bucket.bucket_arn
  destination_region       = var.primary_region
  replica_kms_key_arn      = module.primary_bucket.kms_key_arn
  prefixes                 = [local.dr_cluster_prefix]
  replication_time_control = var.replication_time_control
  alarm_actions            = var.alarm_actions_dr
}
