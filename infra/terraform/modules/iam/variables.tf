variable "name_prefix" {
  description = "Prefix of the IAM policy names, e.g. \"segmirror-eu-west-1\"."
  type        = string
}

variable "bucket_arn" {
  description = "ARN of the bucket the policies grant access to."
  type        = string
}

variable "bucket_region" {
  description = "Region of the bucket (KMS is only usable through S3 in this region: kms:ViaService)."
  type        = string
}

variable "key_prefix" {
  description = "Key prefix segmirror uses in the bucket (the path of s3://bucket/<key_prefix>); \"\" for none."
  type        = string
  default     = ""
  nullable    = false

  validation {
    condition     = var.key_prefix == "" || alltrue([for s in split("/", var.key_prefix) : s != "" && s != "." && s != ".."])
    error_message = "key_prefix must not start or end with '/' and must not contain empty, '.' or '..' segments."
  }
}

variable "kms_key_arn" {
  description = "ARN of the KMS key that encrypts the bucket."
  type        = string
}

variable "shipper_cluster_id" {
  description = "Cluster id of the shipper this policy is for; it may only touch <key_prefix>/segmirror/v1/<shipper_cluster_id>/. null: no shipper policy."
  type        = string
  default     = null

  validation {
    condition     = var.shipper_cluster_id == null ? true : can(regex("^[A-Za-z0-9._-]{1,128}$", var.shipper_cluster_id)) && var.shipper_cluster_id != "." && var.shipper_cluster_id != ".."
    error_message = "shipper_cluster_id must be 1-128 characters of [A-Za-z0-9._-] and not '.' or '..' (manifest::layout::validate_cluster_id)."
  }
}

variable "shipper_may_tag_objects" {
  description = "Also grant s3:PutObjectTagging under the shipper's prefix (needed when the shipper tags data objects for the bucket module's data_expiration_days rule)."
  type        = bool
  default     = false
  nullable    = false
}

variable "applier_source_cluster_ids" {
  description = "Source clusters the applier mirrors; it may only get and list under <key_prefix>/segmirror/v1/<id>/ of these. Empty: no applier policy."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for c in var.applier_source_cluster_ids : can(regex("^[A-Za-z0-9._-]{1,128}$", c)) && c != "." && c != ".."])
    error_message = "Every applier source cluster id must be 1-128 characters of [A-Za-z0-9._-] and not '.' or '..'."
  }
}

variable "shipper_role_names" {
  description = "Names of existing IAM roles to attach the shipper policy to."
  type        = list(string)
  default     = []
  nullable    = false
}

variable "applier_role_names" {
  description = "Names of existing IAM roles to attach the applier policy to."
  type        = list(string)
  default     = []
  nullable    = false
}

variable "tags" {
  description = "Tags for the policies."
  type        = map(string)
  default     = {}
  nullable    = false
}
