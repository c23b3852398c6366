variable "primary_region" {
  description = "Region of the source Kafka cluster and the primary bucket."
  type        = string
  default     = "eu-west-1"
}

variable "dr_region" {
  description = "Region of the DR cluster (the mirror) and the DR bucket."
  type        = string
  default     = "eu-central-1"
}

variable "name" {
  description = "Name prefix of the IAM roles, policies and alarms."
  type        = string
  default     = "segmirror"
}

variable "primary_bucket_name" {
  description = "Name of the primary bucket (region A); bucket names are global."
  type        = string
}

variable "dr_bucket_name" {
  description = "Name of the DR bucket (region B)."
  type        = string
}

variable "key_prefix" {
  description = "Key prefix in both buckets (s3://bucket/<key_prefix>); \"\" for none."
  type        = string
  default     = "kafka"
}

variable "primary_cluster_id" {
  description = "Cluster id of the source Kafka cluster (region A), e.g. its 22-character Kafka cluster id."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,128}$", var.primary_cluster_id)) && var.primary_cluster_id != "." && var.primary_cluster_id != ".."
    error_message = "primary_cluster_id must be 1-128 characters of [A-Za-z0-9._-], not '.' or '..'."
  }
}

variable "dr_cluster_id" {
  description = "Cluster id of the DR cluster (region B); it ships under this id after a failover."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]{1,128}$", var.dr_cluster_id)) && var.dr_cluster_id != "." && var.dr_cluster_id != ".."
    error_message = "dr_cluster_id must be 1-128 characters of [A-Za-z0-9._-], not '.' or '..'."
  }
}

variable "primary_log_dirs" {
  description = "Log dirs of the source broker (its log.dirs) that the shipper reads, read-only."
  type        = list(string)
  default     = ["/var/lib/kafka/data"]

  validation {
    condition     = length(var.primary_log_dirs) > 0 && alltrue([for d in var.primary_log_dirs : startswith(d, "/")])
    error_message = "primary_log_dirs must list at least one absolute path."
  }
}

variable "dr_log_dir" {
  description = "Log dir the applier writes in region B: a Kafka broker starts on it after a failover, so it is the DR broker's log dir."
  type        = string
  default     = "/var/lib/kafka/data"

  validation {
    condition     = startswith(var.dr_log_dir, "/")
    error_message = "dr_log_dir must be an absolute path."
  }
}

variable "topics" {
  description = "Regex (whole name) of the topics the applier starts mirroring automatically."
  type        = string
  default     = ".*"
}

variable "exclude" {
  description = "Regex of topics never started automatically. The default leaves out Kafka's internal topics (__consumer_offsets, __transaction_state): group-offset sync is a separate feature."
  type        = string
  default     = "__.*"
}

variable "poll_interval_ms" {
  description = "Applier poll interval in milliseconds (1 to 3600000). One GET per idle poll."
  type        = number
  default     = 1000

  validation {
    condition     = var.poll_interval_ms >= 1 && var.poll_interval_ms <= 3600000 && floor(var.poll_interval_ms) == var.poll_interval_ms
    error_message = "poll_interval_ms must be an integer from 1 to 3600000."
  }
}

variable "download_concurrency" {
  description = "Objects the applier downloads ahead (1 to 64)."
  type        = number
  default     = 4

  validation {
    condition     = var.download_concurrency >= 1 && var.download_concurrency <= 64 && floor(var.download_concurrency) == var.download_concurrency
    error_message = "download_concurrency must be an integer from 1 to 64."
  }
}

variable "dr_tiered_topics" {
  description = "Topics that have remote.storage.enable=true on the DR cluster (the applier's destination)."
  type        = list(string)
  default     = []
}

variable "primary_tiered_topics" {
  description = "Topics that have remote.storage.enable=true on the primary cluster (the destination during failback)."
  type        = list(string)
  default     = []
}

variable "shipper_metrics_addr" {
  description = "host:port where the shipper serves Prometheus metrics on /metrics."
  type        = string
  default     = "127.0.0.1:9465"
}

variable "applier_metrics_addr" {
  description = "host:port where the applier serves Prometheus metrics on /metrics."
  type        = string
  default     = "127.0.0.1:9464"
}

variable "enable_failback" {
  description = "Also provision the way back: replication of the DR cluster's prefix from the DR bucket to the primary bucket, a shipper role in region B and an applier role in region A, and their rendered configurations."
  type        = bool
  default     = true
}

variable "abort_incomplete_multipart_upload_days" {
  description = "Abort incomplete multipart uploads after this many days (both buckets)."
  type        = number
  default     = 2
}

variable "noncurrent_version_retention_days" {
  description = "Keep deleted (noncurrent) object versions this many days (both buckets): the undo window for deletions."
  type        = number
  default     = 30
}

variable "data_expiration_days" {
  description = "Expire tagged data objects after this many days (both buckets); null disables. See modules/bucket: only safe above the longest topic retention plus applier lag, and only once the shipper tags data objects."
  type        = number
  default     = null
}

variable "replication_time_control" {
  description = "S3 Replication Time Control (15-minute SLA, extra charge)."
  type        = bool
  default     = true
}

variable "alarm_actions_primary" {
  description = "ARNs (e.g. SNS topics in the primary region) notified by the primary-to-DR replication alarms."
  type        = list(string)
  default     = []
}

variable "alarm_actions_dr" {
  description = "ARNs (e.g. SNS topics in the DR region) notified by the DR-to-primary (failback) replication alarms."
  type        = list(string)
  default     = []
}

variable "access_log_bucket_primary" {
  description = "Existing bucket in the primary region that receives the primary bucket's S3 access logs; empty disables."
  type        = string
  default     = ""
}

variable "access_log_bucket_dr" {
  description = "Existing bucket in the DR region that receives the DR bucket's S3 access logs; empty disables."
  type        = string
  default     = ""
}

variable "instance_role_service" {
  description = "Service principal trusted by the shipper and applier roles (EC2 instance profiles by default; see the README for EKS)."
  type        = string
  default     = "ec2.amazonaws.com"
}

variable "tags" {
  description = "Default tags for every resource."
  type        = map(string)
  default     = { "app" = "segmirror" }
}
