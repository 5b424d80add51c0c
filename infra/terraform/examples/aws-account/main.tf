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

  create_pull_agent_policy = true
}
