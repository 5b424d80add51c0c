# The three functions (Cloud Functions gen2 on Cloud Run). Each answers CloudEvents: Eventarc
# deliveries and topocast's own Cloud Tasks / Cloud Scheduler requests (binary-mode CloudEvents).

resource "google_cloudfunctions2_function" "this" {
  for_each = local.functions

  project     = var.project_id
  location    = var.region
  name        = local.function_names[each.key]
  description = "topocast ${each.key} for cluster ${var.cluster}"
  labels      = local.common_labels

  build_config {
    runtime     = var.runtime
    entry_point = each.key # functions/<stage>/main.py defines discover, render, publish
    source {
      storage_source {
        bucket = google_storage_bucket.sources.name
        object = google_storage_bucket_object.source[each.key].name
      }
    }
  }

  service_config {
    service_account_email            = google_service_account.function[each.key].email
    available_memory                 = var.memory[each.key]
    timeout_seconds                  = var.timeout_seconds[each.key]
    max_instance_count               = var.max_instances[each.key]
    max_instance_request_concurrency = 1
    # Callers are Eventarc, Cloud Tasks and Cloud Scheduler of the same project, which internal
    # ingress admits; each carries an OIDC token and IAM (run.invoker) decides on top.
    ingress_settings               = var.ingress_settings
    all_traffic_on_latest_revision = true
    environment_variables          = local.function_env[each.key]
  }
}
