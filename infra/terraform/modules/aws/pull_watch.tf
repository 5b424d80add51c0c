# ----- topocast pull --watch: the published parameters' change events, one queue per head node ---------------
# Parameter Store sends a "Parameter Store Change" event to the default bus for every write of a
# parameter; this rule picks those of the cluster's Slurm path and feeds each head node's queue, which
# its agent long-polls (ReceiveMessage, WaitTimeSeconds=20). A wake-up carries no data: the agent pulls
# the parameter itself, with every check of a single pull. The timer stays the fallback.
locals {
  pull_watch = toset(var.pull_watch_head_nodes)
}

resource "aws_cloudwatch_event_rule" "pull_watch" {
  count = length(local.pull_watch) > 0 ? 1 : 0

  name        = "${local.name}-pull-watch"
  description = "topocast ${var.cluster}: changes of the published Slurm parameters, to the head nodes' queues"
  event_pattern = jsonencode({
    source        = ["aws.ssm"]
    "detail-type" = ["Parameter Store Change"]
    detail = {
      name      = [{ prefix = "${local.ssm_path}/" }]
      operation = ["Create", "Update"]
    }
  })
  tags = local.common_tags
}

resource "aws_sqs_queue" "pull_watch" {
  for_each = local.pull_watch

  name                              = "${local.name}-pull-${each.key}"
  message_retention_seconds         = 3600 # a wake-up older than the fallback's period is worth nothing
  receive_wait_time_seconds         = 20
  visibility_timeout_seconds        = 300 # longer than one pull (validate + install + reconfigure)
  sqs_managed_sse_enabled           = var.kms_key_arn == null ? true : null
  kms_master_key_id                 = var.kms_key_arn
  kms_data_key_reuse_period_seconds = var.kms_key_arn == null ? null : 300
  tags                              = local.common_tags
}

data "aws_iam_policy_document" "pull_watch_queue" {
  for_each = local.pull_watch

  statement {
    sid       = "ParameterChangeEvents"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.pull_watch[each.key].arn]
    principals {
      type        = "Service"
      identifiers = ["events.amazonaws.com"]
    }
    condition {
      test     = "ArnEquals"
      variable = "aws:SourceArn"
      values   = [aws_cloudwatch_event_rule.pull_watch[0].arn]
    }
  }
}

resource "aws_sqs_queue_policy" "pull_watch" {
  for_each = local.pull_watch

  queue_url = aws_sqs_queue.pull_watch[each.key].id
  policy    = data.aws_iam_policy_document.pull_watch_queue[each.key].json
}

resource "aws_cloudwatch_event_target" "pull_watch" {
  for_each = local.pull_watch

  rule      = aws_cloudwatch_event_rule.pull_watch[0].name
  target_id = "pull-${each.key}"
  arn       = aws_sqs_queue.pull_watch[each.key].arn
}

# Each head node may receive and delete the messages of its own queue, nothing else (attach it next to
# the pull agent policy, which reads the parameters).
data "aws_iam_policy_document" "pull_watch_agent" {
  for_each = local.pull_watch

  statement {
    sid       = "WakeUps"
    actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]
    resources = [aws_sqs_queue.pull_watch[each.key].arn]
  }

  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid       = "CustomerKey"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }
}

resource "aws_iam_policy" "pull_watch_agent" {
  for_each = local.pull_watch

  name        = "${local.name}-pull-watch-${each.key}"
  description = "topocast pull --watch on ${each.key}: receive and delete its own change notifications"
  policy      = data.aws_iam_policy_document.pull_watch_agent[each.key].json
  tags        = local.common_tags
}
