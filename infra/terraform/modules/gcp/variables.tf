# Inputs of the topocast GCP module. Every setting the functions read is a variable here and reaches
# them as the TOPOCAST_* environment variable named in its description (shared/topocast/config.py).

# ----- identity ---------------------------------------------------------------------------------------
variable "project_id" {
  description = "Project that runs the functions and owns the cluster's VMs (TOPOCAST_GCP_PROJECT)."
  type        = string
}

variable "region" {
  description = "Region of the functions, queue, scheduler job and triggers."
  type        = string
}

variable "cluster" {
  description = "Cluster name: names resources, keys in the bucket and the graph (TOPOCAST_CLUSTER)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,14}[a-z0-9])?$", var.cluster))
    error_message = "cluster must be 1-16 characters of a-z, 0-9 and '-', starting with a letter (service account IDs <name_prefix>-<cluster>-discover are at most 30 characters)."
  }
}

variable "name_prefix" {
  description = "Prefix of resource names: <name_prefix>-<cluster>-<role>."
  type        = string
  default     = "tc"

  validation {
    condition     = can(regex("^[a-z][a-z0-9]{0,3}$", var.name_prefix))
    error_message = "name_prefix must be 1-4 lowercase letters or digits, starting with a letter (service account IDs are short)."
  }
}

variable "labels" {
  description = "Labels added to every resource that takes labels."
  type        = map(string)
  default     = {}
}

# ----- function sources (topocast package / make package) -----------------------------------------
variable "function_packages" {
  description = "Paths of the source zips built by `make package` (dist/gcp/<function>.zip: main.py, requirements.txt, topocast/). A function is rebuilt when its zip's hash changes."
  type = object({
    discover = string
    render   = string
    publish  = string
  })

  validation {
    condition     = alltrue([for p in values(var.function_packages) : endswith(p, ".zip") && fileexists(p)])
    error_message = "function_packages must name existing .zip files; build them with `make package` (dist/gcp/*.zip)."
  }
}

variable "runtime" {
  description = "Cloud Functions runtime."
  type        = string
  default     = "python312"

  validation {
    condition     = contains(["python311", "python312", "python313"], var.runtime)
    error_message = "runtime must be python311, python312 or python313."
  }
}

variable "memory" {
  description = "Memory per function (Cloud Run units, e.g. 512Mi)."
  type = object({
    discover = optional(string, "512Mi")
    render   = optional(string, "1Gi")
    publish  = optional(string, "512Mi")
  })
  default = {}
}

variable "timeout_seconds" {
  description = "Timeout per function; event-triggered functions allow at most 540."
  type = object({
    discover = optional(number, 300)
    render   = optional(number, 120)
    publish  = optional(number, 300)
  })
  default = {}

  validation {
    condition     = alltrue([for t in values(var.timeout_seconds) : t >= 10 && t <= 540])
    error_message = "timeout_seconds values must be between 10 and 540."
  }
}

variable "max_instances" {
  description = "Most instances per function. Render and publish run one at a time (the debounce lease and never-go-backwards publishing assume it)."
  type = object({
    discover = optional(number, 3)
    render   = optional(number, 1)
    publish  = optional(number, 1)
  })
  default = {}

  validation {
    condition     = var.max_instances.render == 1 && var.max_instances.publish == 1 && var.max_instances.discover >= 1
    error_message = "render and publish must have max_instances 1; discover at least 1."
  }
}

variable "ingress_settings" {
  description = "Network ingress of the functions. Internal admits Eventarc, Cloud Tasks and Cloud Scheduler of the same project (and VPC traffic); ALLOW_ALL only if you call the functions from elsewhere."
  type        = string
  default     = "ALLOW_INTERNAL_ONLY"

  validation {
    condition     = contains(["ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB", "ALLOW_ALL"], var.ingress_settings)
    error_message = "ingress_settings must be ALLOW_INTERNAL_ONLY, ALLOW_INTERNAL_AND_GCLB or ALLOW_ALL."
  }
}

# ----- storage ---------------------------------------------------------------------------------------
variable "bucket_name" {
  description = "Bucket for graphs, rendered files and the published Slurm files (TOPOCAST_BUCKET). Null: <project_id>-<name_prefix>-<cluster>."
  type        = string
  default     = null
}

variable "bucket_location" {
  description = "Location of the buckets. Null: the region."
  type        = string
  default     = null
}

variable "bucket_force_destroy" {
  description = "Let `terraform destroy` delete the buckets with their objects (test projects only)."
  type        = bool
  default     = false
}

variable "prefix" {
  description = "Object prefix inside the bucket (TOPOCAST_PREFIX)."
  type        = string
  default     = "topocast"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.prefix))
    error_message = "prefix must be path segments of letters, digits, '.', '_' and '-' separated by '/'."
  }
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object version is kept (the bucket is versioned)."
  type        = number
  default     = 30
}

variable "kms_key_name" {
  description = "Cloud KMS key for the buckets (CMEK). Null: Google-managed encryption. The Cloud Storage service agent needs roles/cloudkms.cryptoKeyEncrypterDecrypter on it."
  type        = string
  default     = null
}

variable "pull_agent_members" {
  description = "Principals (e.g. serviceAccount:slurm-head@p.iam.gserviceaccount.com) that may read the published Slurm files under <prefix>/<cluster>/slurm/."
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

# ----- discovery -------------------------------------------------------------------------------------
variable "zones" {
  description = "Zones to list (TOPOCAST_GCP_ZONES). Empty: aggregatedList over all zones."
  type        = list(string)
  default     = []
}

variable "instance_labels" {
  description = "Cluster membership as GCE labels (TOPOCAST_GCP_LABEL); all must match. Null: topocast-cluster=<cluster>."
  type        = map(string)
  default     = null
}

variable "name_from" {
  description = "Node name source (TOPOCAST_NAME_FROM): name (the VM name), hostname, instance-id or label:<key>. Null: the code's default, name."
  type        = string
  default     = null

  validation {
    condition     = var.name_from == null || can(regex("^(name|hostname|instance-id|label:.+)$", coalesce(var.name_from, "name")))
    error_message = "name_from must be name, hostname, instance-id or label:<key>."
  }
}

variable "domain_tier" {
  description = "NVLink domain from physicalHostTopology (TOPOCAST_GCP_DOMAIN_TIER): subblock, block or none."
  type        = string
  default     = "subblock"

  validation {
    condition     = contains(["subblock", "block", "none"], var.domain_tier)
    error_message = "domain_tier must be subblock, block or none."
  }
}

variable "full_scan_threshold" {
  description = "Instance events in one window above which discover rescans (TOPOCAST_FULL_SCAN_THRESHOLD)."
  type        = number
  default     = 100
}

variable "discover_window_seconds" {
  description = "Instance events are batched this long before one discovery (TOPOCAST_DISCOVER_WINDOW_SECONDS); 0: one by one."
  type        = number
  default     = 5

  validation {
    condition     = var.discover_window_seconds >= 0 && var.discover_window_seconds <= 600
    error_message = "discover_window_seconds must be between 0 and 600."
  }
}

variable "audit_log_methods" {
  description = "Compute Engine Admin Activity audit-log methodNames that trigger discover, one Eventarc trigger each (the eventarc-audit-log rows of the event table, docs/events.md)."
  type        = list(string)
  default = [
    "v1.compute.instances.insert",
    "beta.compute.instances.insert",
    "compute.instances.insert",
    "v1.compute.instances.start",
    "beta.compute.instances.start",
    "compute.instances.start",
    "v1.compute.instances.resume",
    "beta.compute.instances.resume",
    "compute.instances.resume",
    "v1.compute.instances.delete",
    "beta.compute.instances.delete",
    "compute.instances.delete",
    "v1.compute.instances.stop",
    "beta.compute.instances.stop",
    "compute.instances.stop",
    "v1.compute.instances.suspend",
    "beta.compute.instances.suspend",
    "compute.instances.suspend",
    "v1.compute.instances.setLabels",
    "beta.compute.instances.setLabels",
    "v1.compute.instances.bulkInsert",
    "beta.compute.instances.bulkInsert",
    "compute.instances.repair.recreateInstance",
  ]
}

variable "system_event_methods" {
  description = "Compute Engine System Event audit-log methodNames routed to discover through a Logging sink and a Pub/Sub topic (the log-sink rows of the event table, docs/events.md); empty = no sink."
  type        = list(string)
  default = [
    "compute.instances.preempted",
    "compute.instances.upcomingMaintenance",
    "compute.instances.hostError",
    "compute.instances.automaticRestart",
    "compute.instances.terminateOnHostMaintenance",
    "compute.instances.migrateOnHostMaintenance",
    "compute.instances.guestTerminate",
  ]
}

variable "enable_data_access_audit_logs" {
  description = "Also turn on Compute Engine DATA_WRITE audit logs. Not needed for the default methods: instance insert/delete/start/stop are Admin Activity logs and preemption, host errors and maintenance System Event logs, which are always written."
  type        = bool
  default     = false
}

variable "reconcile_schedule" {
  description = "Cloud Scheduler cron of the full reconcile."
  type        = string
  default     = "*/15 * * * *"
}

variable "reconcile_time_zone" {
  description = "Time zone of reconcile_schedule."
  type        = string
  default     = "Etc/UTC"
}

# ----- debounce ----------------------------------------------------------------------------------------
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

variable "enable_graph_trigger" {
  description = "Also render when a graph generation object lands in the bucket (written by anyone, e.g. `topocast discover --out gcs://`)."
  type        = bool
  default     = false
}

# ----- render / publish ------------------------------------------------------------------------------------
variable "formats" {
  description = "Formats the render function writes (TOPOCAST_FORMATS)."
  type        = list(string)
  default     = ["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "graph", "html"]

  validation {
    condition     = length(var.formats) > 0 && alltrue([for f in var.formats : contains(["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "kueue", "kai", "volcano", "slinky", "graph", "html"], f)])
    error_message = "formats must be a non-empty list of: slurm-tree, slurm-block, slurm-yaml, k8s-labels, kueue, kai, volcano, slinky, graph, html."
  }
}

variable "render_options" {
  description = "RenderOptions as an object, passed as JSON in TOPOCAST_RENDER_OPTIONS. Empty: the code's defaults."
  type        = any
  default     = {}
}

variable "slurm_version" {
  description = "The Slurm release on the head node, e.g. \"26.05\" (TOPOCAST_SLURM_VERSION): a block smaller than the base block size is kept from 25.05 on and left out before (the render report names it). null: files every release accepts (such blocks left out)."
  type        = string
  default     = null
  validation {
    condition     = var.slurm_version == null || can(regex("^[0-9]{2}\\.[0-9]{2}(\\.[0-9]{1,3})?$", var.slurm_version))
    error_message = "slurm_version is a Slurm release such as 26.05 or 24.11.5."
  }
}

variable "publishers" {
  description = "Publish targets (TOPOCAST_PUBLISHERS): gcs (Slurm files under <prefix>/<cluster>/slurm/ for the pull agent) and/or kubernetes."
  type        = list(string)
  default     = ["gcs"]

  validation {
    condition     = alltrue([for p in var.publishers : contains(["gcs", "kubernetes"], p)])
    error_message = "publishers may contain only gcs and kubernetes."
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

variable "k8s_options" {
  description = "Kubernetes publisher options as an object, passed as JSON in TOPOCAST_K8S_OPTIONS. With gke_cluster set, connection.gke_cluster is filled in."
  type        = any
  default     = {}
}

variable "overlays" {
  description = "Merged sources read after topology_source (TOPOCAST_OVERLAYS; docs/providers.md): SOURCE:FIELD=VALUE[,FIELD=VALUE...], e.g. k8s-labels:domain=nvidia.com/gpu.clique for the NVLink cliques on top of the Compute API's sub-blocks. A k8s-labels overlay reaches the cluster like the Kubernetes publisher (gke_cluster / k8s_options.connection). Empty: none."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for o in var.overlays : can(regex("^k8s-labels:(domain|subdomain|fabric|preset)=[^;]+$", o))])
    error_message = "overlays entries must look like k8s-labels:FIELD=VALUE[,FIELD=VALUE...] (FIELD: domain, subdomain, fabric, preset) and contain no ';'."
  }
}

variable "node_labels" {
  description = "Discover from the GKE nodes' topology labels instead of the Compute API (TOPOCAST_PROVIDER = k8s-labels, TOPOCAST_NODE_LABELS: NodeLabelsConfig, {} for the GKE, EKS and Topograph label schemes), on the reconcile schedule, reached like the Kubernetes publisher (gke_cluster / k8s_options.connection). Null: the Compute API (gcp)."
  type        = any
  default     = null
}

variable "gke_cluster" {
  description = "GKE cluster the kubernetes publisher writes to (projects/<p>/locations/<l>/clusters/<name>): the publish service account may read its endpoint (roles/container.clusterViewer). Map the account into RBAC with infra/k8s/rbac.yaml. Null: none."
  type        = string
  default     = null

  validation {
    condition     = var.gke_cluster == null || can(regex("^projects/[^/]+/locations/[^/]+/clusters/[^/]+$", coalesce(var.gke_cluster, "x")))
    error_message = "gke_cluster must look like projects/<project>/locations/<location>/clusters/<name>."
  }
}

variable "follow_rechecks" {
  description = "Re-reads of a VM through host maintenance or a restart until it runs again or is out, at most; 0: one read decides (TOPOCAST_FOLLOW_RECHECKS)."
  type        = number
  default     = 6

  validation {
    condition     = var.follow_rechecks >= 0 && var.follow_rechecks <= 100
    error_message = "follow_rechecks must be within 0..100."
  }
}

variable "follow_interval_seconds" {
  description = "Seconds between those re-reads (TOPOCAST_FOLLOW_INTERVAL_SECONDS; SQS delays at most 900)."
  type        = number
  default     = 30

  validation {
    condition     = var.follow_interval_seconds >= 1 && var.follow_interval_seconds <= 900
    error_message = "follow_interval_seconds must be within 1..900."
  }
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
