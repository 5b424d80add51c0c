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
