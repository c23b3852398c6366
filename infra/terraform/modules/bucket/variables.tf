variable "bucket_name" {
  description = "Name of the bucket (3-63 characters of [a-z0-9.-], as segmirror's s3:// URL parser accepts)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be 3-63 characters of [a-z0-9.-], starting and ending with a letter or digit."
  }
}

variable "key_prefix" {
  description = "Key prefix segmirror is configured with (the path of s3://bucket/<key_prefix>); \"\" for none. Objects live under <key_prefix>/segmirror/v1/<cluster-id>/."
  type        = string
  default     = ""
  nullable    = false

  validation {
    # The same rule as manifest::layout::normalize_prefix, minus the
    # trimming: no leading or trailing '/', no empty, '.' or '..' segment.
    condition     = var.key_prefix == "" || alltrue([for s in split("/", var.key_prefix) : s != "" && s != "." && s != ".."])
    error_message = "key_prefix must not start or end with '/' and must not contain empty, '.' or '..' segments."
  }
}

variable "kms_key_arn" {
  description = "ARN of an existing KMS key for SSE-KMS. Empty: the module creates a key (with rotation) and an alias."
  type        = string
  default     = ""
  nullable    = false
}

variable "kms_key_deletion_window_days" {
  description = "Deletion window of the key the module creates."
  type        = number
  default     = 30
}

variable "abort_incomplete_multipart_upload_days" {
  description = "Abort multipart uploads still incomplete after this many days. The rule covers the whole bucket: an incomplete upload is never named by a manifest."
  type        = number
  default     = 2

  validation {
    condition     = var.abort_incomplete_multipart_upload_days >= 1
    error_message = "abort_incomplete_multipart_upload_days must be at least 1."
  }
}

variable "noncurrent_version_retention_days" {
  description = "Days a noncurrent object version (left behind when the shipper deletes an object below the source's log start, prunes an old head, or a data expiry fires) is kept before it is deleted for good. This is the undo window for deletions."
  type        = number
  default     = 30

  validation {
    condition     = var.noncurrent_version_retention_days >= 1
    error_message = "noncurrent_version_retention_days must be at least 1."
  }
}

variable "data_expiration_days" {
  description = <<-EOT
    Expire current data objects this many days after they were written; null (the default) disables the rule.
    Only objects under <key_prefix>/segmirror/v1/ carrying the tag data_object_tag are affected, so manifests,
    pages and heads never expire. Enable only when the shipper tags data objects and the value exceeds the
    longest retention of any mirrored topic plus the largest applier lag: an expired object that a manifest
    still names cannot be applied (compacted and infinite-retention topics must not be shipped under it).
  EOT
  type        = number
  default     = null

  validation {
    condition     = var.data_expiration_days == null ? true : var.data_expiration_days >= 1
    error_message = "data_expiration_days must be null or at least 1."
  }
}

variable "data_object_tag" {
  description = "The object tag that marks shipped data objects (<...>/data/*.batches) for data_expiration_days."
  type = object({
    key   = string
    value = string
  })
  default = {
    key   = "segmirror-object"
    value = "data"
  }
  nullable = false
}

variable "access_log_bucket" {
  description = "Name of an existing bucket that receives S3 server access logs (it must allow the S3 logging service to write); empty disables access logging."
  type        = string
  default     = ""
  nullable    = false
}

variable "access_log_prefix" {
  description = "Key prefix of the access logs in access_log_bucket; empty: \"s3-access/<bucket_name>/\"."
  type        = string
  default     = ""
  nullable    = false
}

variable "extra_policy_documents" {
  description = "Additional bucket policy documents (JSON) merged into the bucket policy."
  type        = list(string)
  default     = []
  nullable    = false
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete a non-empty bucket. Leave false for a bucket that holds DR data."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource the module creates."
  type        = map(string)
  default     = {}
  nullable    = false
}
