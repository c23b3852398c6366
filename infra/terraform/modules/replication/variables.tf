variable "name" {
  description = "Name of the replication IAM role and prefix of its policy and alarms, e.g. \"segmirror-primary-to-dr\"."
  type        = string
}

variable "source_bucket_name" {
  description = "Name of the bucket to replicate from (versioned)."
  type        = string
}

variable "source_bucket_arn" {
  description = "ARN of the bucket to replicate from."
  type        = string
}

variable "source_region" {
  description = "Region of the source bucket."
  type        = string
}

variable "source_kms_key_arn" {
  description = "KMS key that encrypts the source bucket (the role decrypts with it)."
  type        = string
}

variable "destination_bucket_name" {
  description = "Name of the bucket to replicate into (versioned, in another region)."
  type        = string
}

variable "destination_bucket_arn" {
  description = "ARN of the bucket to replicate into."
  type        = string
}

variable "destination_region" {
  description = "Region of the destination bucket."
  type        = string
}

variable "replica_kms_key_arn" {
  description = "KMS key in the destination region that encrypts the replicas (normally the destination bucket's own key, so the destination's appliers need one key only)."
  type        = string
}

variable "prefixes" {
  description = "Key prefixes to replicate, one rule each: for segmirror, <key_prefix>/segmirror/v1/<cluster-id>/ of each cluster shipping to the source bucket. Each must end with '/'."
  type        = list(string)

  validation {
    condition     = length(var.prefixes) > 0 && alltrue([for p in var.prefixes : endswith(p, "/")])
    error_message = "prefixes must be non-empty and each must end with '/' (so cluster \"a\" does not also match \"ab\")."
  }
}

variable "storage_class" {
  description = "Storage class of the replicas. Keep STANDARD: an applier reads every object soon after it lands, and infrequent-access classes bill retrievals and minimum durations."
  type        = string
  default     = "STANDARD"
}

variable "replicate_delete_markers" {
  description = "Replicate delete markers, so objects the shipper deletes below the source's log start also disappear from the replica (S3 never replicates permanent version deletions)."
  type        = bool
  default     = true
}

variable "replication_time_control" {
  description = "Enable S3 Replication Time Control (15-minute SLA, extra per-GB charge). Replication metrics are on either way."
  type        = bool
  default     = true
}

variable "latency_alarm_threshold_seconds" {
  description = "Alarm when the replication latency of a rule exceeds this many seconds (it bounds the mirror's RPO on top of the shipper's tail interval)."
  type        = number
  default     = 900
}

variable "alarm_actions" {
  description = "ARNs notified when a replication alarm fires (e.g. an SNS topic). Empty: alarms without actions."
  type        = list(string)
  default     = []
  nullable    = false
}

variable "tags" {
  description = "Tags for every resource the module creates."
  type        = map(string)
  default     = {}
  nullable    = false
}
