# What `terraform apply` of the module creates with its defaults, planned offline under mock_provider:
# the inventory README.md's cost note prices. Change a default that adds or resizes a billed
# resource, and this file (and the note) must change with it.

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

run "defaults_plan_the_priced_inventory" {
  command = plan

  assert {
    condition     = length(aws_lambda_function.this) == 3 && alltrue([for f in aws_lambda_function.this : f.architectures == tolist(["x86_64"])])
    error_message = "three x86_64 Lambda functions"
  }
  assert {
    condition = (aws_lambda_function.this["discover"].memory_size == 512 && aws_lambda_function.this["render"].memory_size == 1024
    && aws_lambda_function.this["publish"].memory_size == 512)
    error_message = "memory 512 / 1024 / 512 MB"
  }
  assert {
    condition     = length(aws_sqs_queue.main) == 3 && length(aws_sqs_queue.dlq) == 3
    error_message = "three queues, each with a dead-letter queue"
  }
  assert {
    condition     = aws_dynamodb_table.debounce.billing_mode == "PAY_PER_REQUEST"
    error_message = "the debounce table is on-demand"
  }
  assert {
    condition     = keys(aws_cloudwatch_event_rule.this) == ["ec2-notices", "ec2-state", "reconcile", "tag-change"]
    error_message = "four EventBridge rules on the default bus (no Auto Scaling rule without autoscaling_group_names)"
  }
  assert {
    condition     = aws_cloudwatch_event_rule.this["reconcile"].schedule_expression == "rate(15 minutes)"
    error_message = "a reconcile every 15 minutes: 96 discover runs a day even when nothing happens"
  }
  assert {
    condition     = length(aws_cloudwatch_log_group.this) == 3 && alltrue([for g in aws_cloudwatch_log_group.this : g.retention_in_days == 30])
    error_message = "three log groups kept 30 days"
  }
  assert {
    condition     = length(aws_cloudwatch_metric_alarm.dlq) + length(aws_cloudwatch_metric_alarm.errors) + length(aws_cloudwatch_metric_alarm.publish_held) == 7
    error_message = "seven CloudWatch alarms (three DLQ, three error, one held publish)"
  }
  assert {
    condition     = length(aws_s3_bucket_notification.this) == 0 && length(aws_cloudwatch_metric_alarm.upload_quarantined) == 0
    error_message = "no uploads notification (and its alarm) without on-prem uploads"
  }
}
