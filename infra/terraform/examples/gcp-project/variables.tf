variable "project_id" {
  description = "Project of the cluster and the functions."
  type        = string
}

variable "region" {
  description = "Region of the functions."
  type        = string
}

variable "cluster" {
  description = "Cluster name; its VMs carry the label topocast-cluster=<cluster> unless instance_labels says otherwise."
  type        = string
}

variable "package_dir" {
  description = "Directory holding discover.zip, render.zip and publish.zip from `make package`. Null: <repo>/dist/gcp."
  type        = string
  default     = null
}

variable "instance_labels" {
  description = "Cluster membership as GCE labels. Null: topocast-cluster=<cluster>."
  type        = map(string)
  default     = null
}

variable "publishers" {
  description = "gcs and/or kubernetes."
  type        = list(string)
  default     = ["gcs"]
}

variable "gke_cluster" {
  description = "GKE cluster for the kubernetes publisher (projects/<p>/locations/<l>/clusters/<name>), or null."
  type        = string
  default     = null
}

variable "pull_agent_members" {
  description = "Principals of Slurm head nodes that pull the published files."
  type        = list(string)
  default     = []
}

variable "enable_apis" {
  description = "Enable the Google APIs topocast uses."
  type        = bool
  default     = true
}

# ----- passed to the module as they are (the module's descriptions and defaults)

variable "zones" {
  description = "Zones to list (TOPOCAST_GCP_ZONES). Empty: aggregatedList over all zones."
  type        = list(string)
  default     = []
}

variable "pull_watch_subscribers" {
  description = "Slurm head nodes that run `topocast pull --watch`: name -> principal (e.g. serviceAccount:slurm-head@p.iam.gserviceaccount.com). Each gets a Pub/Sub subscription to the finalize notifications of <prefix>/<cluster>/slurm/ and roles/pubsub.subscriber on it (output pull_watch_subscriptions)."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for n in keys(var.pull_watch_subscribers) : can(regex("^[a-z][a-z0-9-]{0,30}$", n))])
    error_message = "pull_watch_subscribers: keys of at most 31 lowercase letters, digits and '-', starting with a letter (they name subscriptions)."
  }
}

variable "debounce_quiet_seconds" {
  description = "Quiet window after the last change before a render (TOPOCAST_DEBOUNCE_QUIET_SECONDS)."
  type        = number
  default     = 15

  validation {
    condition     = var.debounce_quiet_seconds > 0
    error_message = "debounce_quiet_seconds must be greater than 0."
  }
}

variable "debounce_max_wait_seconds" {
  description = "Longest a change waits for a render (TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS)."
  type        = number
  default     = 120

  validation {
    condition     = var.debounce_max_wait_seconds >= var.debounce_quiet_seconds
    error_message = "debounce_max_wait_seconds must be at least debounce_quiet_seconds."
  }
}

variable "debounce_leading_edge" {
  description = "Render the first change after a quiet window at once; the rest of a burst still debounces into one more render (TOPOCAST_DEBOUNCE_LEADING_EDGE). Off: every change waits out the quiet window (one render per burst)."
  type        = bool
  default     = false
}

variable "generation_retention_days" {
  description = "Days each generation's stored graph and rendered files are kept (<prefix>/<cluster>/graphs/<generation>.json and rendered/<generation>/; the latest.json pointers are never expired), by the bucket's own lifecycle rule. About 8 MB a generation at 10,000 nodes: the one storage cost that grows (docs/cost.md). Null: keep every generation. Keep it longer than the longest time the cluster may go without a change: when the latest generation itself expires, the next discovery finds the store damaged and heals it with a full discovery (docs/architecture.md)."
  type        = number
  default     = null

  validation {
    condition     = var.generation_retention_days == null || try(var.generation_retention_days >= 1 && floor(var.generation_retention_days) == var.generation_retention_days, false)
    error_message = "generation_retention_days must be a whole number of days, at least 1 (or null: keep every generation)."
  }
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object version is kept (the bucket is versioned)."
  type        = number
  default     = 30
}

variable "formats" {
  description = "Formats the render function writes (TOPOCAST_FORMATS)."
  type        = list(string)
  default     = ["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "graph", "html"]

  validation {
    condition     = length(var.formats) > 0 && alltrue([for f in var.formats : contains(["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "kueue", "kai", "volcano", "slinky", "graph", "html"], f)])
    error_message = "formats must be a non-empty list of: slurm-tree, slurm-block, slurm-yaml, k8s-labels, kueue, kai, volcano, slinky, graph, html."
  }
}

variable "guard_max_loss" {
  description = "Fraction of the published nodes one publish may drop before it is held (TOPOCAST_GUARD_MAX_LOSS)."
  type        = number
  default     = 0.1

  validation {
    condition     = var.guard_max_loss >= 0 && var.guard_max_loss <= 1
    error_message = "guard_max_loss must be between 0 and 1."
  }
}

variable "reconcile_schedule" {
  description = "Cloud Scheduler cron of the full reconcile."
  type        = string
  default     = "*/15 * * * *"
}
