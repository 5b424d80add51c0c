output "bucket_name" {
  description = "Data bucket (TOPOCAST_BUCKET)."
  value       = google_storage_bucket.data.name
}

output "function_names" {
  description = "Function names by stage."
  value       = { for k, f in google_cloudfunctions2_function.this : k => f.name }
}

output "function_urls" {
  description = "Function URLs by stage (what Cloud Tasks and Cloud Scheduler call)."
  value       = local.function_urls
}

output "service_accounts" {
  description = "Service account emails by role: discover, render, publish, invoker, trigger."
  value = merge(
    { for k, sa in google_service_account.function : k => sa.email },
    { invoker = google_service_account.invoker.email, trigger = google_service_account.trigger.email },
  )
}

output "task_queue" {
  description = "Cloud Tasks queue (TOPOCAST_TASK_QUEUE)."
  value       = google_cloud_tasks_queue.tasks.id
}

output "slurm_prefix" {
  description = "Where the gcs publisher writes the Slurm files (the pull agent's --source is gcs://<bucket>/<prefix>/topology.conf)."
  value       = "gs://${google_storage_bucket.data.name}/${local.key_base}/slurm/"
}

output "function_environment" {
  description = "Environment variables set on each function."
  value       = local.function_env
}

output "events_topic" {
  description = "Pub/Sub topic of the system-event Logging sink, delivered to discover; publish the text reconcile to it for a full discovery."
  value       = google_pubsub_topic.events.id
}

output "pull_watch_subscriptions" {
  description = "Head node -> the Pub/Sub subscription its `topocast pull --watch --subscription` pulls."
  value       = { for k, sub in google_pubsub_subscription.pull_watch : k => sub.id }
}
