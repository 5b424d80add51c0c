# EventBridge rules on the default bus, all targeting the events queue. (S3 upload notifications go
# to the same queue directly, see storage.tf.)
#
# EC2 state-change events carry no tags, so the ec2-state rule cannot be narrowed to the cluster: the
# discover function keeps only instances matching TOPOCAST_FILTERS. Auto Scaling events are filtered to
# the cluster's groups here. "pending" is left out: topology is only known once an instance runs.
# Interruption warnings are region-wide too; discover notes them (they change nothing).
# Cluster membership is a tag (ec2_filters tag:KEY=...): a tag change of an EC2 instance on one of those
# keys (EventBridge's aws.tag "Tag Change on Resource") re-reads that instance, in or out of the cluster.

locals {
  # The event patterns come from the event table (shared/topocast/app/event_table.py, aws_rule_patterns):
  # event-patterns.json is generated from it and tests/test_event_wiring.py keeps the two equal, so
  # every kind the parser acts on is delivered and nothing it would reject is.
  event_patterns = jsondecode(file("${path.module}/event-patterns.json"))

  # the tag keys that decide membership (tag:topocast:cluster=c1 -> topocast:cluster); none: no tag rule
  membership_tag_keys = [for f in local.ec2_filters : trimprefix(split("=", f)[0], "tag:") if startswith(f, "tag:")]

  event_rules = merge(
    # with topology_source = ibnetdiscover or netq, EC2 events say nothing about the fabric (and every
    # instance change in the region would start a full on-prem discovery), so there is no EC2 rule
    !local.ec2_source ? {} : {
      ec2-state = {
        description = "EC2 instance state changes (discover keeps the cluster's instances)"
        pattern     = jsonencode(local.event_patterns["ec2-state"])
        schedule    = null
        input       = null
      }
      # Spot / rebalance / capacity-reservation warnings are noted (counted, nothing moves); a delivered
      # Capacity Block starts a reconcile
      ec2-notices = {
        description = "EC2 interruption warnings and Capacity Block notices"
        pattern     = jsonencode(local.event_patterns["ec2-notices"])
        schedule    = null
        input       = null
      }
    },
    {
      # always on: the safety net for lost events, and the only trigger of topology_source = netq
      reconcile = {
        description = "Periodic full discovery of cluster ${var.cluster}"
        pattern     = null
        schedule    = var.reconcile_schedule
        # A Reconcile envelope (shared/topocast/aws/events.py) naming the cluster.
        input = jsonencode({ source = "topocast", "detail-type" = "Reconcile", detail = { cluster = var.cluster } })
      }
    },
    !local.ec2_source || length(local.membership_tag_keys) == 0 ? {} : {
      tag-change = {
        description = "EC2 instances tagged into or out of cluster ${var.cluster} (${join(", ", local.membership_tag_keys)})"
        pattern = jsonencode(merge(local.event_patterns["tag-change"], {
          detail = merge(local.event_patterns["tag-change"].detail, { "changed-tag-keys" = local.membership_tag_keys })
        }))
        schedule = null
        input    = null
      }
    },
    !local.ec2_source || length(var.autoscaling_group_names) == 0 ? {} : {
      autoscaling = {
        description = "Auto Scaling launches, terminations and terminate lifecycle actions of cluster ${var.cluster}"
        pattern = jsonencode(merge(local.event_patterns["autoscaling"], {
          detail = { AutoScalingGroupName = var.autoscaling_group_names }
        }))
        schedule = null
        input    = null
      }
    },
  )
}

resource "aws_cloudwatch_event_rule" "this" {
  for_each = local.event_rules

  name                = "${local.name}-${each.key}"
  description         = each.value.description
  event_pattern       = each.value.pattern
  schedule_expression = each.value.schedule
  tags                = local.common_tags
}

resource "aws_cloudwatch_event_target" "this" {
  for_each = local.event_rules

  rule      = aws_cloudwatch_event_rule.this[each.key].name
  target_id = "discover-queue"
  arn       = aws_sqs_queue.main["events"].arn
  input     = each.value.input
}
