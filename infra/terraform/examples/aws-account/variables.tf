variable "region" {
  description = "AWS region of the cluster (topology is regional)."
  type        = string
}

variable "cluster" {
  description = "Cluster name; its instances carry the tag topocast:cluster=<cluster> unless ec2_filters says otherwise."
  type        = string
}

variable "package_dir" {
  description = "Directory holding discover.zip, render.zip and publish.zip from `make package`. Null: <repo>/dist/aws."
  type        = string
  default     = null
}

variable "ec2_filters" {
  description = "Cluster membership as EC2 filters NAME=V1,V2. Null: tag:topocast:cluster=<cluster>."
  type        = list(string)
  default     = null
}

variable "autoscaling_group_names" {
  description = "Auto Scaling groups of the cluster."
  type        = list(string)
  default     = []
}

variable "publishers" {
  description = "ssm and/or kubernetes."
  type        = list(string)
  default     = ["ssm"]
}

variable "eks_cluster_name" {
  description = "EKS cluster for the kubernetes publisher (null: none)."
  type        = string
  default     = null
}

variable "alarm_topic_arn" {
  description = "SNS topic for alarms (null: none)."
  type        = string
  default     = null
}

variable "bucket_force_destroy" {
  description = "Let destroy delete a non-empty bucket (test accounts)."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}

# ----- passed to the module as they are (the module's descriptions and defaults)

variable "topology_source" {
  description = "Where discover reads the topology (TOPOCAST_PROVIDER): aws (EC2 DescribeInstanceTopology), ibnetdiscover (dumps uploaded by on-prem collectors to <prefix>/<cluster>/uploads/), netq (the NetQ API, on the reconcile schedule only; see docs/onprem.md) or k8s-labels (the EKS nodes' topology labels, on the reconcile schedule only, reached like the Kubernetes publisher: eks_cluster_name / k8s_options.connection; docs/kubernetes.md). The EC2 and Auto Scaling rules and the EC2 grants exist only with aws."
  type        = string
  default     = "aws"

  validation {
    condition     = contains(["aws", "ibnetdiscover", "netq", "k8s-labels"], var.topology_source)
    error_message = "topology_source must be aws, ibnetdiscover, netq or k8s-labels."
  }
}

variable "overlays" {
  description = "Merged sources read after topology_source (TOPOCAST_OVERLAYS; docs/providers.md): SOURCE:FIELD=VALUE[,FIELD=VALUE...], e.g. k8s-labels:domain=nvidia.com/gpu.clique for the NVLink cliques on top of EC2's capacity blocks. A k8s-labels overlay reaches the cluster like the Kubernetes publisher (eks_cluster_name / k8s_options.connection). Empty: none."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for o in var.overlays : can(regex("^k8s-labels:(domain|subdomain|fabric|preset)=[^;]+$", o))])
    error_message = "overlays entries must look like k8s-labels:FIELD=VALUE[,FIELD=VALUE...] (FIELD: domain, subdomain, fabric, preset) and contain no ';'."
  }
}

variable "pull_watch_head_nodes" {
  description = "Slurm head nodes that run `topocast pull --watch`: each gets an SQS queue fed by an EventBridge rule on the published parameters' change events, and an IAM policy to receive from it (outputs pull_watch_queue_urls, pull_watch_policy_arns)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for n in var.pull_watch_head_nodes : can(regex("^[A-Za-z0-9_-]{1,40}$", n))])
    error_message = "pull_watch_head_nodes: names of at most 40 letters, digits, '-' and '_' (they name queues)."
  }
}

variable "debounce_quiet_seconds" {
  description = "Quiet window after the last change before a render (TOPOCAST_DEBOUNCE_QUIET_SECONDS); at most 900, the longest SQS delay."
  type        = number
  default     = 15

  validation {
    condition     = var.debounce_quiet_seconds > 0 && var.debounce_quiet_seconds <= 900
    error_message = "debounce_quiet_seconds must be greater than 0 and at most 900."
  }
}

variable "debounce_max_wait_seconds" {
  description = "Longest a change waits for a render while changes keep coming (TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS)."
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

  validation {
    condition     = var.noncurrent_version_days >= 1
    error_message = "noncurrent_version_days must be at least 1."
  }
}

variable "lambda_architecture" {
  description = "Lambda CPU architecture; must match the --platform the packages were built for."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.lambda_architecture)
    error_message = "lambda_architecture must be x86_64 or arm64."
  }
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
  description = "Fraction of the published nodes one publish may drop before it is held for confirmation (TOPOCAST_GUARD_MAX_LOSS)."
  type        = number
  default     = 0.1

  validation {
    condition     = var.guard_max_loss >= 0 && var.guard_max_loss <= 1
    error_message = "guard_max_loss must be between 0 and 1."
  }
}

variable "reconcile_schedule" {
  description = "EventBridge schedule of the full reconcile (rate(...) or cron(...)). With topology_source = netq it is the only trigger: NetQ sends no events."
  type        = string
  default     = "rate(15 minutes)"

  validation {
    condition     = can(regex("^(rate|cron)\\(.+\\)$", var.reconcile_schedule))
    error_message = "reconcile_schedule must be rate(...) or cron(...)."
  }
}
