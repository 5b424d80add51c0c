# Three standard queues between the stages, each with a dead-letter queue:
#   events  (EventBridge -> discover)   timer (debounce timers -> render)   publish (render -> publish)
# The timer queue is standard, not FIFO, because the debounce timers are per-message DelaySeconds.

locals {
  # queue -> the function consuming it
  queue_consumer = { events = "discover", timer = "render", publish = "publish" }
}

resource "aws_sqs_queue" "dlq" {
  for_each = local.queue_consumer

  name                              = "${local.name}-${each.key}-dlq"
  message_retention_seconds         = 1209600 # 14 days, the maximum: time to look at what failed
  sqs_managed_sse_enabled           = var.kms_key_arn == null ? true : null
  kms_master_key_id                 = var.kms_key_arn
  kms_data_key_reuse_period_seconds = var.kms_key_arn == null ? null : 300
  tags                              = local.common_tags
}

resource "aws_sqs_queue" "main" {
  for_each = local.queue_consumer

  name = "${local.name}-${each.key}"
  # Set here rather than with aws_sqs_queue_policy: one propagation wait less on every apply.
  policy = each.key == "events" ? data.aws_iam_policy_document.events_queue.json : null
  # Lambda's event source mapping needs a visibility timeout of at least the function timeout; 6x is AWS's advice.
  visibility_timeout_seconds        = min(43200, 6 * var.lambda_timeout_seconds[each.value])
  message_retention_seconds         = 345600 # 4 days
  sqs_managed_sse_enabled           = var.kms_key_arn == null ? true : null
  kms_master_key_id                 = var.kms_key_arn
  kms_data_key_reuse_period_seconds = var.kms_key_arn == null ? null : 300

  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq[each.key].arn
    maxReceiveCount     = var.max_receive_count
  })

  tags = local.common_tags
}

# Only its own source queue may use a dead-letter queue.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  for_each  = var.restrict_dlq_sources ? local.queue_consumer : {}
  queue_url = aws_sqs_queue.dlq[each.key].id

  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.main[each.key].arn]
  })
}

# The events queue accepts messages only from this module's EventBridge rules and its bucket. The
# ARNs are spelled out because the policy is part of the queue (and the rules target the queue).
locals {
  events_queue_arn = "arn:${local.partition}:sqs:${local.region}:${local.account_id}:${local.name}-events"
  event_rule_arns  = [for k in keys(local.event_rules) : "arn:${local.partition}:events:${local.region}:${local.account_id}:rule/${local.name}-${k}"]
}

data "aws_iam_policy_document" "events_queue" {
  statement {
    sid       = "EventBridgeRules"
    actions   = ["sqs:SendMessage"]
    resources = [local.events_queue_arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = local.event_rule_arns
    }
  }

  dynamic "statement" {
    for_each = local.upload_events ? [1] : []
    content {
      sid       = "BucketUploads"
      actions   = ["sqs:SendMessage"]
      resources = [local.events_queue_arn]
      principals {
        type        = "Service"
        identifiers = ["s3.amazonaws.com"]
      }
      condition {
        test     = "ArnEquals"
        variable = "aws:SourceArn"
        values   = [aws_s3_bucket.this.arn]
      }
      condition {
        test     = "StringEquals"
        variable = "aws:SourceAccount"
        values   = [local.account_id]
      }
    }
  }
}
