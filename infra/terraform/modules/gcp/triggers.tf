# What starts the functions: Eventarc on Compute Engine audit logs (discover), a Logging sink of the
# System Event audit logs to the events topic (discover), the Cloud Tasks queue
# (discover windows, debounce timers, publish hand-offs), Cloud Scheduler (reconcile) and optionally
# Eventarc on graph objects (render).

resource "google_eventarc_trigger" "audit" {
  for_each = toset(var.audit_log_methods)

  project         = var.project_id
  location        = "global" # Compute Engine audit logs are global
  name            = "${local.name}-${replace(lower(each.value), "/[^a-z0-9]+/", "-")}"
  service_account = google_service_account.trigger.email
  labels          = local.common_labels

  matching_criteria {
    attribute = "type"
    value     = "google.cloud.audit.log.v1.written"
  }
  matching_criteria {
    attribute = "serviceName"
    value     = "compute.googleapis.com"
  }
  matching_criteria {
    attribute = "methodName"
    value     = each.value
  }

  destination {
    cloud_run_service {
      service = google_cloudfunctions2_function.this["discover"].service_config[0].service
      region  = var.region
    }
  }

  depends_on = [google_project_iam_member.trigger_receiver]
}

# System Event audit logs (preemption, host errors, host maintenance, automatic restarts, guest
# shutdowns) are written by Compute Engine itself, not by a caller. Eventarc's audit-log triggers
# match Admin Activity and Data Access logs, so these go through a Logging sink to the events topic,
# and an Eventarc Pub/Sub trigger hands each LogEntry to discover (topocast.gcp.events parses the
# entry inside the message exactly like an Eventarc audit-log event). The same topic accepts a
# reconcile request: `gcloud pubsub topics publish TOPIC --message=reconcile`.
locals {
  system_event_filter = join(" AND ", compact([
    "logName=\"projects/${var.project_id}/logs/cloudaudit.googleapis.com%2Fsystem_event\"",
    "protoPayload.serviceName=\"compute.googleapis.com\"",
    "protoPayload.methodName=(${join(" OR ", [for m in var.system_event_methods : "\"${m}\""])})",
    length(var.zones) == 0 ? "" : "resource.labels.zone=(${join(" OR ", [for z in var.zones : "\"${z}\""])})",
  ]))
}

resource "google_pubsub_topic" "events" {
  #checkov:skip=CKV_GCP_83:Messages are audit-log entries and reconcile requests, no payload data; kms_key_name (when set) encrypts the buckets, and a topic key would also need the Pub/Sub service agent granted on it.
  project = var.project_id
  name    = "${local.name}-events"
  labels  = local.common_labels
}

resource "google_logging_project_sink" "system_events" {
  count = length(var.system_event_methods) > 0 ? 1 : 0

  project                = var.project_id
  name                   = "${local.name}-system-events"
  destination            = "pubsub.googleapis.com/${google_pubsub_topic.events.id}"
  filter                 = local.system_event_filter
  unique_writer_identity = true
}

resource "google_pubsub_topic_iam_member" "sink_publishes" {
  count = length(var.system_event_methods) > 0 ? 1 : 0

  project = var.project_id
  topic   = google_pubsub_topic.events.name
  role    = "roles/pubsub.publisher"
  member  = google_logging_project_sink.system_events[0].writer_identity
}

resource "google_eventarc_trigger" "events_topic" {
  project         = var.project_id
  location        = var.region
  name            = "${local.name}-events"
  service_account = google_service_account.trigger.email
  labels          = local.common_labels

  matching_criteria {
    attribute = "type"
    value     = "google.cloud.pubsub.topic.v1.messagePublished"
  }

  transport {
    pubsub {
      topic = google_pubsub_topic.events.id
    }
  }

  destination {
    cloud_run_service {
      service = google_cloudfunctions2_function.this["discover"].service_config[0].service
      region  = var.region
    }
  }

  depends_on = [google_project_iam_member.trigger_receiver]
}

# Only needed for Data Access methods; Admin Activity and System Event logs are always on.
resource "google_project_iam_audit_config" "compute" {
  count = var.enable_data_access_audit_logs ? 1 : 0

  project = var.project_id
  service = "compute.googleapis.com"
  audit_log_config {
    log_type = "DATA_WRITE"
  }
}

# The debounce and hand-off mechanism: named tasks deduplicate, schedule_time delays.
resource "google_cloud_tasks_queue" "tasks" {
  project  = var.project_id
  location = var.region
  name     = "${local.name}-tasks"

  rate_limits {
    max_dispatches_per_second = 10
    max_concurrent_dispatches = 5
  }

  retry_config {
    max_attempts       = 10
    min_backoff        = "5s"
    max_backoff        = "300s"
    max_doublings      = 5
    max_retry_duration = "3600s"
  }
}

# Full discovery on a schedule: a binary-mode CloudEvent of type dev.topocast.reconcile.v1.
resource "google_cloud_scheduler_job" "reconcile" {
  project   = var.project_id
  region    = var.region
  name      = "${local.name}-reconcile"
  schedule  = var.reconcile_schedule
  time_zone = var.reconcile_time_zone

  http_target {
    uri         = local.function_urls.discover
    http_method = "POST"
    headers = {
      "Content-Type"   = "application/json"
      "ce-specversion" = "1.0"
      "ce-type"        = "dev.topocast.reconcile.v1"
      "ce-source"      = "//cloudscheduler.googleapis.com/${local.name}-reconcile"
      "ce-id"          = "reconcile"
    }
    body = base64encode(jsonencode({ cluster = var.cluster, reason = "schedule" }))
    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = local.function_urls.discover
    }
  }
}

# Optional: render whatever graph generation lands in the bucket.
resource "google_project_iam_member" "gcs_publishes_events" {
  count = var.enable_graph_trigger ? 1 : 0

  project = var.project_id
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:service-${data.google_project.this.number}@gs-project-accounts.iam.gserviceaccount.com"
}

resource "google_eventarc_trigger" "graphs" {
  count = var.enable_graph_trigger ? 1 : 0

  project         = var.project_id
  location        = local.bucket_location
  name            = "${local.name}-graphs"
  service_account = google_service_account.trigger.email
  labels          = local.common_labels

  matching_criteria {
    attribute = "type"
    value     = "google.cloud.storage.object.v1.finalized"
  }
  matching_criteria {
    attribute = "bucket"
    value     = google_storage_bucket.data.name
  }

  destination {
    cloud_run_service {
      service = google_cloudfunctions2_function.this["render"].service_config[0].service
      region  = var.region
    }
  }

  depends_on = [google_project_iam_member.gcs_publishes_events, google_project_iam_member.trigger_receiver]
}
