# generation_retention_days: the module's own lifecycle rules expire old generations, never the pointers.

mock_provider "aws" {
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}" }
  }
  mock_data "aws_region" {
    defaults = { name = "us-east-1" }
  }
}

variables {
  cluster = "c1"
  function_packages = {
    discover = "tests/fixtures/handler.zip"
    render   = "tests/fixtures/handler.zip"
    publish  = "tests/fixtures/handler.zip"
  }
}

run "without_retention_every_generation_stays" {
  command = plan

  assert {
    condition     = [for r in aws_s3_bucket_lifecycle_configuration.this.rule : r.id] == ["expire-noncurrent-versions"]
    error_message = "only the non-current version rule when generation_retention_days is null"
  }
}

run "retention_expires_generations_not_the_pointers" {
  command = plan

  variables {
    generation_retention_days = 14
  }

  assert {
    condition = [for r in aws_s3_bucket_lifecycle_configuration.this.rule : r.id] == [
      "expire-noncurrent-versions", "expire-old-graphs", "expire-old-rendered", "remove-expired-delete-markers"
    ]
    error_message = "one rule per generation prefix, and one for the delete markers they leave"
  }
  assert {
    condition = [for r in aws_s3_bucket_lifecycle_configuration.this.rule : r.filter[0].prefix if startswith(r.id, "expire-old-")] == [
      "topocast/c1/graphs/0", "topocast/c1/rendered/0"
    ]
    error_message = "generation keys (12 digits) match; graphs/latest.json and rendered/latest.json do not"
  }
  assert {
    condition     = alltrue([for r in aws_s3_bucket_lifecycle_configuration.this.rule : r.expiration[0].days == 14 if startswith(r.id, "expire-old-")])
    error_message = "14 days after a generation was written"
  }
}

run "retention_below_one_day_is_refused" {
  command = plan

  variables {
    generation_retention_days = 0
  }

  expect_failures = [var.generation_retention_days]
}
