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
