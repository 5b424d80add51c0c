# One service account per function, plus one that Cloud Tasks / Cloud Scheduler sign requests as
# (invoker) and one for the Eventarc triggers. Roles are the narrowest predefined ones, bound on
# the resource (bucket, queue, service) wherever the API allows.
#
#   discover: compute.instances.get/list (roles/compute.viewer, project: no narrower scope exists),
#             objects in the data bucket, create tasks on the queue acting as the invoker account
#   render:   objects in the data bucket, create tasks (timers, publish hand-offs) as the invoker
#   publish:  objects in the data bucket; container.clusters.get on the GKE cluster (optional)

resource "google_service_account" "function" {
  for_each = local.functions

  project      = var.project_id
  account_id   = "${local.name}-${each.key}"
  display_name = "topocast ${each.key} (${var.cluster})"
}

resource "google_service_account" "invoker" {
  project      = var.project_id
  account_id   = "${local.name}-invoker"
  display_name = "topocast Cloud Tasks/Scheduler invoker (${var.cluster})"
}

resource "google_service_account" "trigger" {
  project      = var.project_id
  account_id   = "${local.name}-trigger"
  display_name = "topocast Eventarc triggers (${var.cluster})"
}

# ----- data bucket: objects under the prefixes each function uses, nothing else ------------------------
# IAM conditions (uniform bucket-level access is on): resource.name is the object for object calls and the
# bucket itself for a listing. Only publish may write slurm/ (what the pull agents install); render and
# discover never touch it. Mirrors the AWS roles (modules/aws/iam.tf).
locals {
  object_areas = {
    discover = ["graphs", "pending", "state", "rendered"] # markers in pending/, lease + debounce + hold in state/
    render   = ["graphs", "rendered", "state"]            # debounce and the published record in state/
    publish  = ["graphs", "rendered", "state", "slurm"]
  }
  bucket_resource = "projects/_/buckets/${google_storage_bucket.data.name}"
}

resource "google_storage_bucket_iam_member" "function_objects" {
  for_each = local.functions

  bucket = google_storage_bucket.data.name
  role   = "roles/storage.objectUser"
  member = google_service_account.function[each.key].member
  condition {
    title       = "topocast-${each.key}-areas"
    description = "objects under ${join(", ", local.object_areas[each.key])} of ${local.key_base}, and listing the bucket"
    expression = join(" || ", concat(
      ["resource.name == \"${local.bucket_resource}\""],
      [for area in local.object_areas[each.key] : "resource.name.startsWith(\"${local.bucket_resource}/objects/${local.key_base}/${area}/\")"],
    ))
  }
}

resource "google_storage_bucket_iam_member" "pull_agent" {
  for_each = toset(var.pull_agent_members)

  bucket = google_storage_bucket.data.name
  role   = "roles/storage.objectViewer"
  member = each.value
  condition {
    title      = "topocast-slurm-files"
    expression = "resource.name.startsWith(\"projects/_/buckets/${google_storage_bucket.data.name}/objects/${local.key_base}/slurm/\")"
  }
}

# ----- discovery --------------------------------------------------------------------------------------------
resource "google_project_iam_member" "discover_compute" {
  project = var.project_id
  role    = "roles/compute.viewer"
  member  = google_service_account.function["discover"].member
}

# ----- Cloud Tasks: discover and render enqueue, as the invoker account -----------------------------------
resource "google_cloud_tasks_queue_iam_member" "enqueuer" {
  for_each = toset(["discover", "render"])

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.tasks.name
  role     = "roles/cloudtasks.enqueuer"
  member   = google_service_account.function[each.key].member
}

resource "google_service_account_iam_member" "act_as_invoker" {
  for_each = toset(["discover", "render"])

  service_account_id = google_service_account.invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.function[each.key].member
}

# ----- who may call the functions ------------------------------------------------------------------------
resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = local.functions

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.this[each.key].service_config[0].service
  role     = "roles/run.invoker"
  member   = google_service_account.invoker.member
}

resource "google_cloud_run_v2_service_iam_member" "trigger" {
  for_each = var.enable_graph_trigger ? toset(["discover", "render"]) : toset(["discover"])

  project  = var.project_id
  location = var.region
  name     = google_cloudfunctions2_function.this[each.key].service_config[0].service
  role     = "roles/run.invoker"
  member   = google_service_account.trigger.member
}

resource "google_project_iam_member" "trigger_receiver" {
  project = var.project_id
  role    = "roles/eventarc.eventReceiver"
  member  = google_service_account.trigger.member
}

# ----- Kubernetes publisher on GKE: read the cluster's endpoint; RBAC comes from infra/k8s/rbac.yaml ------
resource "google_project_iam_member" "publish_gke" {
  count = var.gke_cluster == null ? 0 : 1

  project = split("/", var.gke_cluster)[1]
  role    = "roles/container.clusterViewer"
  member  = google_service_account.function["publish"].member
}

# node_labels (k8s-labels discovery) on GKE without a given endpoint: discover reads the endpoint too
resource "google_project_iam_member" "discover_gke" {
  count = local.discover_gke_lookup ? 1 : 0

  project = split("/", var.gke_cluster)[1]
  role    = "roles/container.clusterViewer"
  member  = google_service_account.function["discover"].member
}
