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

  depends_on = [google_project_service.apis]
}
