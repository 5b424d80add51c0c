# The three functions, their log groups and their queue triggers.
#
# Reserved concurrency 1 on each: one discover at a time keeps graph generations in order (S3
# conditional writes make a second writer retry anyway), one render at a time holds the debounce
# lease without contention, one publish at a time means SSM values never go backwards (SSM has no
# conditional put). Every package has handler.py at the zip root, so the handler is handler.handler.

locals {
  triggers = {
    discover = { queue = "events", batch_size = var.events_batch_size, window = var.events_batching_window_seconds }
    render   = { queue = "timer", batch_size = 10, window = 0 }
    publish  = { queue = "publish", batch_size = 10, window = 0 }
  }
}

resource "aws_cloudwatch_log_group" "this" {
  #checkov:skip=CKV_AWS_338:Retention is log_retention_days (30 by default: operational logs); set 365 or more where policy requires.
  for_each = local.functions

  name              = "/aws/lambda/${local.name}-${each.key}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
  tags              = local.common_tags
}

resource "aws_lambda_function" "this" {
  #checkov:skip=CKV_AWS_116:SQS-triggered: failed messages go to each queue's dead-letter queue (redrive), a function DLQ only applies to async invokes.
  #checkov:skip=CKV_AWS_117:The functions call only AWS APIs; VPC placement is optional (vpc_subnet_ids) for private EKS endpoints.
  #checkov:skip=CKV_AWS_173:The environment holds names and URLs, no secrets; it is encrypted with kms_key_arn when one is given.
  #checkov:skip=CKV_AWS_50:X-Ray is off on purpose: the SDK costs ~100 ms of cold start and the pipeline logs and emits metrics per stage.
  #checkov:skip=CKV_AWS_272:Code signing is optional (code_signing_config_arn); packages are built reproducibly by `make package`.
  for_each = local.functions

  function_name                  = "${local.name}-${each.key}"
  description                    = "topocast ${each.key} for cluster ${var.cluster}"
  role                           = aws_iam_role.this[each.key].arn
  handler                        = "handler.handler"
  runtime                        = var.lambda_runtime
  architectures                  = [var.lambda_architecture]
  filename                       = var.function_packages[each.key]
  source_code_hash               = filebase64sha256(var.function_packages[each.key])
  memory_size                    = var.lambda_memory_mb[each.key]
  timeout                        = var.lambda_timeout_seconds[each.key]
  reserved_concurrent_executions = 1
  kms_key_arn                    = var.kms_key_arn
  code_signing_config_arn        = var.code_signing_config_arn

  environment {
    variables = local.function_env[each.key]
  }

  dynamic "vpc_config" {
    for_each = length(var.vpc_subnet_ids) > 0 ? [1] : []
    content {
      subnet_ids         = var.vpc_subnet_ids
      security_group_ids = var.vpc_security_group_ids
    }
  }

  tags = local.common_tags

  lifecycle {
    # discover's role may read only this bucket (iam.tf); a generated bucket name is known at apply
    precondition {
      condition     = each.key != "discover" || local.domains_key == null || startswith(coalesce(var.domains_uri, "none"), "s3://${aws_s3_bucket.this.id}/")
      error_message = "domains_uri ${coalesce(var.domains_uri, "none")} is not in the module's bucket ${aws_s3_bucket.this.id}; discover may read only that bucket."
    }
  }

  depends_on = [aws_cloudwatch_log_group.this, aws_iam_role_policy.this]
}

resource "aws_lambda_event_source_mapping" "this" {
  for_each = local.triggers

  function_name                      = aws_lambda_function.this[each.key].arn
  event_source_arn                   = aws_sqs_queue.main[each.value.queue].arn
  batch_size                         = each.value.batch_size
  maximum_batching_window_in_seconds = each.value.window
  # Handlers return {"batchItemFailures": [...]}: only failed messages are retried.
  function_response_types = ["ReportBatchItemFailures"]
}
