# ----- topocast pull --watch: the published objects' finalize notifications, one subscription per head node ----
# Cloud Storage notifies a Pub/Sub topic when an object under <prefix>/<cluster>/slurm/ is written
# (OBJECT_FINALIZE); each head node pulls its own subscription (`topocast pull --watch --subscription`).
# A notification carries no data the agent trusts: it fetches the object itself, with every check of a
# single pull. The timer stays the fallback.
locals {
  pull_watch = var.pull_watch_subscribers
}

resource "google_pubsub_topic" "pull_watch" {
  #checkov:skip=CKV_GCP_83:Messages are object-change notifications (bucket, name, generation), no payload data; a topic key would also need the Pub/Sub service agent granted on it.
  count = length(local.pull_watch) > 0 ? 1 : 0

  project = var.project_id
  name    = "${local.name}-slurm-published"
  labels  = local.common_labels
}

data "google_storage_project_service_account" "gcs" {
  count   = length(local.pull_watch) > 0 ? 1 : 0
  project = var.project_id
}

# The Cloud Storage service agent publishes the notifications; only to this topic.
resource "google_pubsub_topic_iam_member" "gcs_publishes" {
  count = length(local.pull_watch) > 0 ? 1 : 0

  project = var.project_id
  topic   = google_pubsub_topic.pull_watch[0].name
  role    = "roles/pubsub.publisher"
  member  = data.google_storage_project_service_account.gcs[0].member
}

resource "google_storage_notification" "pull_watch" {
  count = length(local.pull_watch) > 0 ? 1 : 0

  bucket             = google_storage_bucket.data.name
  payload_format     = "JSON_API_V1"
  topic              = google_pubsub_topic.pull_watch[0].id
  event_types        = ["OBJECT_FINALIZE"]
  object_name_prefix = "${local.key_base}/slurm/"
  depends_on         = [google_pubsub_topic_iam_member.gcs_publishes]
}

resource "google_pubsub_subscription" "pull_watch" {
  for_each = local.pull_watch

  project                    = var.project_id
  name                       = "${local.name}-pull-${each.key}"
  topic                      = google_pubsub_topic.pull_watch[0].id
  ack_deadline_seconds       = 300     # longer than one pull (validate + install + reconfigure)
  message_retention_duration = "3600s" # a wake-up older than the fallback's period is worth nothing
  labels                     = local.common_labels
  expiration_policy {
    ttl = "" # an idle head node keeps its subscription
  }
}

# Each head node may pull and acknowledge its own subscription, nothing else.
resource "google_pubsub_subscription_iam_member" "pull_watch" {
  for_each = local.pull_watch

  project      = var.project_id
  subscription = google_pubsub_subscription.pull_watch[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = each.value
}
