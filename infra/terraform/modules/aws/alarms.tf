# Alarms an operator acts on: anything in a dead-letter queue, any function error, any held publish.

locals {
  alarm_actions = var.alarm_topic_arn == null ? [] : [var.alarm_topic_arn]
}

resource "aws_cloudwatch_metric_alarm" "dlq" {
  for_each = var.create_alarms ? local.queue_consumer : {}

  alarm_name          = "${local.name}-${each.key}-dlq-not-empty"
  alarm_description   = "Messages for ${each.value} of cluster ${var.cluster} failed ${var.max_receive_count} times and wait in ${aws_sqs_queue.dlq[each.key].name}."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = aws_sqs_queue.dlq[each.key].name }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.common_tags
}

resource "aws_cloudwatch_metric_alarm" "errors" {
  for_each = var.create_alarms ? local.functions : toset([])

  alarm_name          = "${local.name}-${each.key}-errors"
  alarm_description   = "The ${each.key} function of cluster ${var.cluster} failed (see its log group)."
  namespace           = "AWS/Lambda"
  metric_name         = "Errors"
  dimensions          = { FunctionName = aws_lambda_function.this[each.key].function_name }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.common_tags
}

# The publish function emits the EMF metric PublishHeld (namespace and service "topocast") when the
# blast-radius guard holds a publish; an operator confirms or overrides it.
resource "aws_cloudwatch_metric_alarm" "publish_held" {
  count = var.create_alarms ? 1 : 0

  alarm_name          = "${local.name}-publish-held"
  alarm_description   = "A publish for cluster ${var.cluster} was held by the guard; set ${local.guard_override_parameter} to the generation to let it through."
  namespace           = "topocast"
  metric_name         = "PublishHeld"
  dimensions          = { service = "topocast" }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.common_tags
}

# The discover function emits QuarantinedUploads when an on-prem upload could not be read (too large,
# not ibnetdiscover output): it was moved to <prefix>/<cluster>/quarantine/ with the reason in its
# metadata, and discovery used that host's last good upload.
resource "aws_cloudwatch_metric_alarm" "upload_quarantined" {
  count = var.create_alarms && local.upload_events ? 1 : 0

  alarm_name          = "${local.name}-upload-quarantined"
  alarm_description   = "An on-prem upload for cluster ${var.cluster} was unusable and moved to ${local.key_base}/quarantine/ (reason in its metadata); discovery uses that host's last good upload."
  namespace           = "topocast"
  metric_name         = "QuarantinedUploads"
  dimensions          = { service = "topocast" }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"
  alarm_actions       = local.alarm_actions
  ok_actions          = local.alarm_actions
  tags                = local.common_tags
}
