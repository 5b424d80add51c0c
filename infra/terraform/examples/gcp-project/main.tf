# One apply per Google Cloud project and region: topocast for one GPU cluster, using the source
# archives from `make package` (dist/gcp/*.zip).

provider "google" {
  project = var.project_id
  region  = var.region
}

locals {
  package_dir = coalesce(var.package_dir, "${path.root}/../../../../dist/gcp")
  apis = [
    "cloudfunctions.googleapis.com", "run.googleapis.com", "cloudbuild.googleapis.com", "artifactregistry.googleapis.com",
    "eventarc.googleapis.com", "cloudtasks.googleapis.com", "cloudscheduler.googleapis.com", "compute.googleapis.com",
    "storage.googleapis.com", "pubsub.googleapis.com", "logging.googleapis.com",
  ]
}

resource "google_project_service" "apis" {
  for_each = var.enable_apis ? toset(local.apis) : toset([])

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

module "topocast" {
  source = "../../modules/gcp"

  project_id = var.project_id
  region     = var.region
  cluster    = var.cluster
  function_packages = {
    discover = "${local.package_dir}/discover.zip"
    render   = "${local.package_dir}/render.zip"
    publish  = "${local.package_dir}/publish.zip"
  }

  instance_labels    = var.instance_labels
  publishers         = var.publishers
  gke_cluster        = var.gke_cluster
  pull_agent_members = var.pull_agent_members


  # what an operator tunes (variables.tf: the module's own descriptions and defaults)
  zones                     = var.zones
  pull_watch_subscribers    = var.pull_watch_subscribers
  debounce_quiet_seconds    = var.debounce_quiet_seconds
  debounce_max_wait_seconds = var.debounce_max_wait_seconds
  debounce_leading_edge     = var.debounce_leading_edge
  generation_retention_days = var.generation_retention_days
  noncurrent_version_days   = var.noncurrent_version_days
  formats                   = var.formats
  guard_max_loss            = var.guard_max_loss
  reconcile_schedule        = var.reconcile_schedule

  depends_on = [google_project_service.apis]
}
