# topocast on Google Cloud, one project and region per apply:
#
#   Compute Engine audit logs --Eventarc--> discover --(Cloud Tasks: discover window)--> discover
#   System Event audit logs --Logging sink--> events topic --Eventarc--> discover
#   Cloud Scheduler (reconcile CloudEvent) ----------> discover -> graph generation in GCS
#   discover --(Cloud Tasks: debounce timer)--> render -> rendered files --(Cloud Tasks)--> publish
#   publish -> <prefix>/<cluster>/slurm/ in the bucket (Slurm pull agent), GKE
#
# Debounce state lives in the bucket (<prefix>/<cluster>/state/debounce.json, generation-conditioned
# writes); timers and hand-offs are named Cloud Tasks (deduplicated), delivered as binary-mode
# CloudEvents with an OIDC token of the invoker service account.

locals {
  name      = "${var.name_prefix}-${var.cluster}"
  functions = toset(["discover", "render", "publish"])

  bucket_name     = coalesce(var.bucket_name, "${var.project_id}-${local.name}")
  bucket_location = coalesce(var.bucket_location, var.region)
  key_base        = "${var.prefix}/${var.cluster}"
  instance_labels = coalesce(var.instance_labels, { "topocast-cluster" = var.cluster })

  # Function URLs are known before the functions exist (each one's env names the others and itself).
  function_names = { for fn in local.functions : fn => "${local.name}-${fn}" }
  function_urls  = { for fn in local.functions : fn => "https://${var.region}-${var.project_id}.cloudfunctions.net/${local.function_names[fn]}" }

  render_options_json = length(var.render_options) > 0 ? jsonencode(var.render_options) : ""
  k8s_options_json = var.gke_cluster == null ? jsonencode(var.k8s_options) : jsonencode(merge(var.k8s_options, {
    connection = merge(try(var.k8s_options.connection, {}), { gke_cluster = var.gke_cluster })
  }))

  common_labels = merge(var.labels, { "topocast-cluster" = var.cluster })

  # node_labels set: discover reads the GKE nodes' labels, through the publisher's connection; the
  # endpoint comes from the GKE API (container.clusters.get) unless k8s_options.connection.endpoint is given
  node_source = var.node_labels != null
  # an overlay on the node labels (overlays = ["k8s-labels:..."]) reaches the cluster the same way
  k8s_reader          = local.node_source || anytrue([for o in var.overlays : startswith(o, "k8s-labels:")])
  discover_gke_lookup = local.k8s_reader && var.gke_cluster != null && try(var.k8s_options.connection.endpoint, null) == null

  # ----- environment: exactly the variables shared/topocast/config.py (ENV_VARS) reads ---------------
  common_env = {
    TOPOCAST_CLUSTER               = var.cluster
    TOPOCAST_BUCKET                = google_storage_bucket.data.name
    TOPOCAST_PREFIX                = var.prefix
    TOPOCAST_GCP_PROJECT           = var.project_id
    TOPOCAST_TASK_QUEUE            = google_cloud_tasks_queue.tasks.id
    TOPOCAST_TASKS_SERVICE_ACCOUNT = google_service_account.invoker.email
  }
  stage_env = {
    discover = {
      TOPOCAST_PROVIDER                  = local.node_source ? "k8s-labels" : "gcp"
      TOPOCAST_NODE_LABELS               = local.node_source ? jsonencode(var.node_labels) : ""
      TOPOCAST_K8S_OPTIONS               = local.k8s_reader && local.k8s_options_json != "{}" ? local.k8s_options_json : ""
      TOPOCAST_OVERLAYS                  = join(";", var.overlays)
      TOPOCAST_GCP_ZONES                 = join(";", var.zones)
      TOPOCAST_GCP_LABEL                 = join(";", [for k, v in local.instance_labels : "${k}=${v}"])
      TOPOCAST_GCP_DOMAIN_TIER           = var.domain_tier
      TOPOCAST_NAME_FROM                 = var.name_from
      TOPOCAST_FULL_SCAN_THRESHOLD       = tostring(var.full_scan_threshold)
      TOPOCAST_GUARD_MAX_LOSS            = tostring(var.guard_max_loss)
      TOPOCAST_DISCOVER_WINDOW_SECONDS   = tostring(var.discover_window_seconds)
      TOPOCAST_FOLLOW_RECHECKS           = tostring(var.follow_rechecks)
      TOPOCAST_FOLLOW_INTERVAL_SECONDS   = tostring(var.follow_interval_seconds)
      TOPOCAST_DISCOVER_URL              = local.function_urls.discover
      TOPOCAST_RENDER_URL                = local.function_urls.render
      TOPOCAST_PUBLISH_URL               = local.function_urls.publish
      TOPOCAST_DEBOUNCE_QUIET_SECONDS    = tostring(var.debounce_quiet_seconds)
      TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS = tostring(var.debounce_max_wait_seconds)
      TOPOCAST_DEBOUNCE_LEADING_EDGE     = tostring(var.debounce_leading_edge)
    }
    render = {
      TOPOCAST_FORMATS                   = join(";", var.formats)
      TOPOCAST_RENDER_OPTIONS            = local.render_options_json
      TOPOCAST_SLURM_VERSION             = var.slurm_version == null ? "" : var.slurm_version
      TOPOCAST_RENDER_URL                = local.function_urls.render
      TOPOCAST_PUBLISH_URL               = local.function_urls.publish
      TOPOCAST_DEBOUNCE_QUIET_SECONDS    = tostring(var.debounce_quiet_seconds)
      TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS = tostring(var.debounce_max_wait_seconds)
      TOPOCAST_DEBOUNCE_LEADING_EDGE     = tostring(var.debounce_leading_edge)
    }
    publish = {
      TOPOCAST_FORMATS        = join(";", var.formats)
      TOPOCAST_PUBLISHERS     = join(";", var.publishers)
      TOPOCAST_GUARD_MAX_LOSS = tostring(var.guard_max_loss)
      TOPOCAST_K8S_OPTIONS    = local.k8s_options_json == "{}" ? "" : local.k8s_options_json
    }
  }
  function_env = {
    for fn in local.functions : fn => {
      for k, v in merge(local.common_env, local.stage_env[fn]) : k => v if v != ""
    }
  }
}

data "google_project" "this" {
  project_id = var.project_id
}
