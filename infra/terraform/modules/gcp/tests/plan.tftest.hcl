# What `terraform apply` of the module creates with its defaults, planned offline under mock_provider:
# the inventory README.md's cost note prices. Runs only where a hashicorp/google mirror exists
# (tests/test_terraform.py): mock_provider still loads the real provider binary for its schema.

mock_provider "google" {
  mock_data "google_project" {
    defaults = { number = "123456789012" }
  }
}

variables {
  project_id = "ml-prod"
  region     = "us-central1"
  cluster    = "c1"
  function_packages = {
    discover = "tests/fixtures/handler.zip"
    render   = "tests/fixtures/handler.zip"
    publish  = "tests/fixtures/handler.zip"
  }
}

run "defaults_plan_the_priced_inventory" {
  command = plan

  assert {
    condition     = length(google_cloudfunctions2_function.this) == 3
    error_message = "three Cloud Run functions (gen2)"
  }
  assert {
    condition     = length(google_eventarc_trigger.audit) == 21 && length(google_logging_project_sink.system_events) == 1
    error_message = "21 Eventarc audit-log triggers and one Logging sink for the system events"
  }
  assert {
    condition     = google_cloud_scheduler_job.reconcile.schedule == "*/15 * * * *"
    error_message = "one Cloud Scheduler job, a reconcile every 15 minutes"
  }
  assert {
    condition     = length(google_project_iam_audit_config.compute) == 0
    error_message = "no Data Access audit logs (billed) by default"
  }
}
