# Roles for the hosts that run the shipper and the applier (EC2 instance
# profiles; for EKS, trust the cluster's OIDC provider instead: README).
# Permissions come from modules/iam, one instance per bucket.

data "aws_iam_policy_document" "instance_assume" {
  statement {
    effect  = "Allow"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = [var.instance_role_service]
    }
  }
}

# Region A: the source cluster's shipper.
resource "aws_iam_role" "shipper_primary" {
  provider = aws.primary

  name               = "${var.name}-shipper-${var.primary_region}"
  description        = "segmirror shipper of cluster ${var.primary_cluster_id} (${var.primary_region})"
  assume_role_policy = data.aws_iam_policy_document.instance_assume.json

  lifecycle {
    precondition {
      condition     = var.primary_region != var.dr_region
      error_message = "primary_region and dr_region must differ: this example is cross-region DR."
    }
    precondition {
      condition     = var.primary_cluster_id != var.dr_cluster_id
      error_message = "primary_cluster_id and dr_cluster_id must differ: each cluster ships under its own id."
    }
    precondition {
      condition     = var.primary_bucket_name != var.dr_bucket_name
      error_message = "primary_bucket_name and dr_bucket_name must differ."
    }
  }
}

resource "aws_iam_instance_profile" "shipper_primary" {
  provider = aws.primary

  name = aws_iam_role.shipper_primary.name
  role = aws_iam_role.shipper_primary.name
}

# Region B: the applier that keeps the mirror.
resource "aws_iam_role" "applier_dr" {
  provider = aws.dr

  name               = "${var.name}-applier-${var.dr_region}"
  description        = "segmirror applier of ${var.primary_cluster_id} into ${var.dr_cluster_id} (${var.dr_region})"
  assume_role_policy = data.aws_iam_policy_document.instance_assume.json
}

resource "aws_iam_instance_profile" "applier_dr" {
  provider = aws.dr

  name = aws_iam_role.applier_dr.name
  role = aws_iam_role.applier_dr.name
}

# Failback: region B ships, region A applies.
resource "aws_iam_role" "shipper_dr" {
  provider = aws.dr
  count    = var.enable_failback ? 1 : 0

  name               = "${var.name}-shipper-${var.dr_region}"
  description        = "segmirror shipper of cluster ${var.dr_cluster_id} after a failover (${var.dr_region})"
  assume_role_policy = data.aws_iam_policy_document.instance_assume.json
}

resource "aws_iam_instance_profile" "shipper_dr" {
  provider = aws.dr
  count    = var.enable_failback ? 1 : 0

  name = aws_iam_role.shipper_dr[0].name
  role = aws_iam_role.shipper_dr[0].name
}

resource "aws_iam_role" "applier_primary" {
  provider = aws.primary
  count    = var.enable_failback ? 1 : 0

  name               = "${var.name}-applier-${var.primary_region}"
  description        = "segmirror applier of ${var.dr_cluster_id} into ${var.primary_cluster_id} for failback (${var.primary_region})"
  assume_role_policy = data.aws_iam_policy_document.instance_assume.json
}

resource "aws_iam_instance_profile" "applier_primary" {
  provider = aws.primary
  count    = var.enable_failback ? 1 : 0

  name = aws_iam_role.applier_primary[0].name
  role = aws_iam_role.applier_primary[0].name
}

# Primary bucket: the source's shipper writes its prefix; the failback
# applier reads the DR cluster's (replicated) prefix.
module "iam_primary" {
  source    = "../../modules/iam"
  providers = { aws = aws.primary }

  name_prefix                = "${var.name}-${var.primary_region}"
  bucket_arn                 = module.primary_bucket.bucket_arn
  bucket_region              = var.primary_region
  key_prefix                 = var.key_prefix
  kms_key_arn                = module.primary_bucket.kms_key_arn
  shipper_cluster_id         = var.primary_cluster_id
  shipper_may_tag_objects    = var.data_expiration_days != null
  shipper_role_names         = [aws_iam_role.shipper_primary.name]
  applier_source_cluster_ids = var.enable_failback ? [var.dr_cluster_id] : []
  applier_role_names         = aws_iam_role.applier_primary[*].name
}

# DR bucket: the applier reads the primary cluster's (replicated) prefix;
# after a failover the DR cluster's shipper writes its own prefix.
module "iam_dr" {
  source    = "../../modules/iam"
  providers = { aws = aws.dr }

  name_prefix                = "${var.name}-${var.dr_region}"
  bucket_arn                 = module.dr_bucket.bucket_arn
  bucket_region              = var.dr_region
  key_prefix                 = var.key_prefix
  kms_key_arn                = module.dr_bucket.kms_key_arn
  shipper_cluster_id         = var.enable_failback ? var.dr_cluster_id : null
  shipper_may_tag_objects    = var.data_expiration_days != null
  shipper_role_names         = aws_iam_role.shipper_dr[*].name
  applier_source_cluster_ids = [var.primary_cluster_id]
  applier_role_names         = [aws_iam_role.applier_dr.name]
}
