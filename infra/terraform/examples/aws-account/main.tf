# One apply per AWS account and region: topocast for one GPU cluster, using the packages from
# `make package` (dist/aws/*.zip).

provider "aws" {
  region = var.region

  default_tags {
    tags = var.tags
  }
}

locals {
  package_dir = coalesce(var.package_dir, "${path.root}/../../../../dist/aws")
}

module "topocast" {
  source = "../../modules/aws"

  cluster = var.cluster
  function_packages = {
    discover = "${local.package_dir}/discover.zip"
    render   = "${local.package_dir}/render.zip"
    publish  = "${local.package_dir}/publish.zip"
  }

  ec2_filters             = var.ec2_filters
  autoscaling_group_names = var.autoscaling_group_names
  publishers              = var.publishers
  eks_cluster_name        = var.eks_cluster_name
  alarm_topic_arn         = var.alarm_topic_arn
  bucket_force_destroy    = var.bucket_force_destroy


  # what an operator tunes (variables.tf: the module's own descriptions and defaults)
  topology_source           = var.topology_source
  overlays                  = var.overlays
  pull_watch_head_nodes     = var.pull_watch_head_nodes
  debounce_quiet_seconds    = var.debounce_quiet_seconds
  debounce_max_wait_seconds = var.debounce_max_wait_seconds
  debounce_leading_edge     = var.debounce_leading_edge
  generation_retention_days = var.generation_retention_days
  noncurrent_version_days   = var.noncurrent_version_days
  lambda_architecture       = var.lambda_architecture
  formats                   = var.formats
  guard_max_loss            = var.guard_max_loss
  reconcile_schedule        = var.reconcile_schedule

  create_pull_agent_policy = true
}
