# terraform test for the wiring of the AWS module, offline: mock_provider generates computed values
# (ARNs, URLs), so `command = apply` can compare the references between resources.
# Run: terraform init -backend=false && terraform test   (tests/test_terraform.py does it with the local mirror)

mock_provider "aws" {
  mock_data "aws_region" {
    defaults = { name = "eu-west-1" }
  }
  mock_data "aws_caller_identity" {
    defaults = { account_id = "111122223333" }
  }
  mock_data "aws_partition" {
    defaults = { partition = "aws" }
  }
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}" }
  }
  # The provider still validates ARN arguments, so computed ARNs need a valid shape.
  mock_resource "aws_iam_role" {
    defaults = { arn = "arn:aws:iam::111122223333:role/mock" }
  }
  mock_resource "aws_lambda_function" {
    defaults = { arn = "arn:aws:lambda:eu-west-1:111122223333:function:mock" }
  }
  mock_resource "aws_s3_bucket" {
    defaults = { arn = "arn:aws:s3:::mock-bucket", id = "mock-bucket" }
  }
  mock_resource "aws_dynamodb_table" {
    defaults = { arn = "arn:aws:dynamodb:eu-west-1:111122223333:table/mock" }
  }
  mock_resource "aws_cloudwatch_event_rule" {
    defaults = { arn = "arn:aws:events:eu-west-1:111122223333:rule/mock" }
  }
  mock_resource "aws_sqs_queue" {
    defaults = { arn = "arn:aws:sqs:eu-west-1:111122223333:mock", url = "https://sqs.eu-west-1.amazonaws.com/111122223333/mock" }
  }
}

# Distinct queue ARNs/URLs, so that "the right queue" assertions can fail.
override_resource {
  target = aws_sqs_queue.main["events"]
  values = { arn = "arn:aws:sqs:eu-west-1:111122223333:events", url = "https://sqs.eu-west-1.amazonaws.com/111122223333/events" }
}
override_resource {
  target = aws_sqs_queue.main["timer"]
  values = { arn = "arn:aws:sqs:eu-west-1:111122223333:timer", url = "https://sqs.eu-west-1.amazonaws.com/111122223333/timer" }
}
override_resource {
  target = aws_sqs_queue.main["publish"]
  values = { arn = "arn:aws:sqs:eu-west-1:111122223333:publish", url = "https://sqs.eu-west-1.amazonaws.com/111122223333/publish" }
}
override_resource {
  target = aws_sqs_queue.dlq["events"]
  values = { arn = "arn:aws:sqs:eu-west-1:111122223333:events-dlq", url = "https://sqs.eu-west-1.amazonaws.com/111122223333/events-dlq" }
}

variables {
  cluster = "c1"
  function_packages = {
    discover = "tests/fixtures/handler.zip"
    render   = "tests/fixtures/handler.zip"
    publish  = "tests/fixtures/handler.zip"
  }
}

run "event_rules_route_the_cluster_events_to_the_events_queue" {
  command = apply

  assert {
    condition     = jsondecode(aws_cloudwatch_event_rule.this["ec2-state"].event_pattern) == { source = ["aws.ec2"], "detail-type" = ["EC2 Instance State-change Notification"], detail = { state = ["running", "stopping", "stopped", "shutting-down", "terminated"] } }
    error_message = "the EC2 rule must match state changes to running/stopping/stopped/shutting-down/terminated only"
  }
  assert {
    condition     = contains(jsondecode(aws_cloudwatch_event_rule.this["ec2-notices"].event_pattern)["detail-type"], "EC2 Spot Instance Interruption Warning") && contains(jsondecode(aws_cloudwatch_event_rule.this["ec2-notices"].event_pattern)["detail-type"], "Capacity Block Delivered")
    error_message = "the notices rule must deliver Spot interruption warnings and delivered Capacity Blocks (noted / reconcile)"
  }
  assert {
    condition     = jsondecode(aws_cloudwatch_event_rule.this["tag-change"].event_pattern) == { source = ["aws.tag"], "detail-type" = ["Tag Change on Resource"], detail = { service = ["ec2"], "resource-type" = ["instance"], "changed-tag-keys" = ["topocast:cluster"] } }
    error_message = "the tag rule must deliver tag changes of EC2 instances on the membership key (tag:topocast:cluster=c1 by default) only"
  }
  assert {
    condition     = aws_cloudwatch_event_rule.this["reconcile"].schedule_expression == "rate(15 minutes)"
    error_message = "the reconcile schedule defaults to 15 minutes"
  }
  assert {
    condition     = jsondecode(aws_cloudwatch_event_target.this["reconcile"].input) == { source = "topocast", "detail-type" = "Reconcile", detail = { cluster = "c1" } }
    error_message = "the reconcile target must send a topocast Reconcile envelope naming the cluster"
  }
  assert {
    condition     = alltrue([for t in aws_cloudwatch_event_target.this : t.arn == aws_sqs_queue.main["events"].arn])
    error_message = "every rule must target the events queue"
  }
  assert {
    condition     = !contains(keys(aws_cloudwatch_event_rule.this), "autoscaling") && length(aws_s3_bucket_notification.this) == 0
    error_message = "without group names or uploads there is no Auto Scaling rule or bucket notification"
  }
  assert {
    condition     = aws_sqs_queue.main["events"].policy == data.aws_iam_policy_document.events_queue.json
    error_message = "the events queue carries the EventBridge policy"
  }
  assert {
    condition     = one(one([for s in data.aws_iam_policy_document.events_queue.statement : s.condition if s.sid == "EventBridgeRules"])).values == tolist(["arn:aws:events:eu-west-1:111122223333:rule/topocast-c1-ec2-notices", "arn:aws:events:eu-west-1:111122223333:rule/topocast-c1-ec2-state", "arn:aws:events:eu-west-1:111122223333:rule/topocast-c1-reconcile", "arn:aws:events:eu-west-1:111122223333:rule/topocast-c1-tag-change"])
    error_message = "the events queue accepts messages only from this module's rules"
  }
}

run "optional_rules_are_filtered_to_the_cluster" {
  command = apply

  variables {
    autoscaling_group_names = ["c1-p5", "c1-p5e"]
    enable_upload_events    = true
  }

  assert {
    condition     = jsondecode(aws_cloudwatch_event_rule.this["autoscaling"].event_pattern).detail == { AutoScalingGroupName = ["c1-p5", "c1-p5e"] }
    error_message = "the Auto Scaling rule must be filtered to the configured groups"
  }
  assert {
    condition     = jsondecode(aws_cloudwatch_event_rule.this["autoscaling"].event_pattern)["detail-type"] == ["EC2 Instance Launch Successful", "EC2 Instance Terminate Successful", "EC2 Instance-terminate Lifecycle Action"]
    error_message = "the Auto Scaling rule must match launches, terminations and terminate lifecycle actions"
  }
  assert {
    condition     = one(aws_s3_bucket_notification.this[0].queue).filter_prefix == "topocast/c1/uploads/" && one(aws_s3_bucket_notification.this[0].queue).queue_arn == aws_sqs_queue.main["events"].arn
    error_message = "uploads under <prefix>/<cluster>/uploads/ must notify the events queue"
  }
  assert {
    condition     = contains(one([for s in data.aws_iam_policy_document.discover.statement : s.resources if s.sid == "ReadGraphsAndState"]), "${aws_s3_bucket.this.arn}/topocast/c1/uploads/*")
    error_message = "discover must be able to read uploads when upload events are on"
  }
}

run "queues_have_dead_letter_queues_and_triggers" {
  command = apply

  assert {
    condition     = alltrue([for k, q in aws_sqs_queue.main : jsondecode(q.redrive_policy).deadLetterTargetArn == aws_sqs_queue.dlq[k].arn && jsondecode(q.redrive_policy).maxReceiveCount == 5])
    error_message = "each queue must redrive to its own DLQ after 5 receives"
  }
  assert {
    condition     = alltrue([for k, p in aws_sqs_queue_redrive_allow_policy.dlq : jsondecode(p.redrive_allow_policy).sourceQueueArns == [aws_sqs_queue.main[k].arn]])
    error_message = "each DLQ must accept only its source queue"
  }
  assert {
    condition     = aws_lambda_event_source_mapping.this["discover"].event_source_arn == aws_sqs_queue.main["events"].arn && aws_lambda_event_source_mapping.this["discover"].function_name == aws_lambda_function.this["discover"].arn
    error_message = "discover must consume the events queue"
  }
  assert {
    condition     = aws_lambda_event_source_mapping.this["render"].event_source_arn == aws_sqs_queue.main["timer"].arn && aws_lambda_event_source_mapping.this["publish"].event_source_arn == aws_sqs_queue.main["publish"].arn
    error_message = "render must consume the timer queue and publish the publish queue"
  }
  assert {
    condition     = aws_lambda_event_source_mapping.this["discover"].batch_size == 1000 && aws_lambda_event_source_mapping.this["discover"].maximum_batching_window_in_seconds == 10
    error_message = "discover batches up to 1000 events over 10 s by default"
  }
  assert {
    condition     = aws_lambda_event_source_mapping.this["render"].batch_size == 10
    error_message = "render takes timers in batches of 10"
  }
  assert {
    condition     = alltrue([for m in aws_lambda_event_source_mapping.this : m.function_response_types == toset(["ReportBatchItemFailures"])])
    error_message = "every trigger must report partial batch failures"
  }
  assert {
    condition     = alltrue([for k, q in aws_sqs_queue.main : q.visibility_timeout_seconds >= aws_lambda_function.this[local.queue_consumer[k]].timeout])
    error_message = "a queue's visibility timeout must cover its consumer's timeout"
  }
}

run "functions_get_the_environment_the_code_reads" {
  command = apply

  variables {
    ec2_filters    = ["tag:Cluster=c1", "instance-type=p5.48xlarge,p5e.48xlarge"]
    formats        = ["slurm-tree", "k8s-labels"]
    publishers     = ["ssm", "kubernetes"]
    name_from      = "tag:Name"
    k8s_options    = { formats = ["k8s-labels"] }
    render_options = { block_sizes = [8, 16] }
  }

  assert {
    condition     = aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_FILTERS"] == "tag:Cluster=c1;instance-type=p5.48xlarge,p5e.48xlarge"
    error_message = "filters are joined with ';' (values keep their commas)"
  }
  assert {
    condition     = aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_TIMER_QUEUE_URL"] == aws_sqs_queue.main["timer"].url && aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_DLQ_URL"] == aws_sqs_queue.dlq["events"].url && aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_PUBLISH_QUEUE_URL"] == aws_sqs_queue.main["publish"].url
    error_message = "discover arms timers on the timer queue, parks bad events in the events DLQ, hands confirmed holds to publish"
  }
  assert {
    condition     = aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_NAME_FROM"] == "tag:Name" && aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_STATE_TABLE"] == aws_dynamodb_table.debounce.name
    error_message = "discover needs the name source and the debounce table"
  }
  assert {
    condition     = aws_lambda_function.this["render"].environment[0].variables["TOPOCAST_FORMATS"] == "slurm-tree;k8s-labels" && aws_lambda_function.this["render"].environment[0].variables["TOPOCAST_PUBLISH_QUEUE_URL"] == aws_sqs_queue.main["publish"].url
    error_message = "render needs its formats and the publish queue"
  }
  assert {
    condition     = jsondecode(aws_lambda_function.this["render"].environment[0].variables["TOPOCAST_RENDER_OPTIONS"]) == { block_sizes = [8, 16] } && aws_lambda_function.this["publish"].environment[0].variables["TOPOCAST_RENDER_OPTIONS"] == aws_lambda_function.this["render"].environment[0].variables["TOPOCAST_RENDER_OPTIONS"]
    error_message = "render options are passed as JSON, to publish too (the label scheme)"
  }
  assert {
    condition     = aws_lambda_function.this["publish"].environment[0].variables["TOPOCAST_PUBLISHERS"] == "ssm;kubernetes" && aws_lambda_function.this["publish"].environment[0].variables["TOPOCAST_SSM_PREFIX"] == "/topocast/c1/slurm"
    error_message = "publish needs its targets and the SSM path"
  }
  assert {
    condition     = !contains(keys(aws_lambda_function.this["publish"].environment[0].variables), "TOPOCAST_STATE_TABLE") && !contains(keys(aws_lambda_function.this["discover"].environment[0].variables), "TOPOCAST_PUBLISHERS")
    error_message = "a function gets only the settings of its stage"
  }
  assert {
    condition     = alltrue([for f in aws_lambda_function.this : f.environment[0].variables["TOPOCAST_CLUSTER"] == "c1" && f.environment[0].variables["TOPOCAST_BUCKET"] == aws_s3_bucket.this.id && f.environment[0].variables["POWERTOOLS_SERVICE_NAME"] == "topocast"])
    error_message = "every function knows the cluster, the bucket and the Powertools service"
  }
  assert {
    condition     = alltrue([for f in aws_lambda_function.this : f.handler == "handler.handler" && f.runtime == "python3.12" && f.reserved_concurrent_executions == 1])
    error_message = "handler.handler on python3.12 with reserved concurrency 1"
  }
  assert {
    condition     = aws_lambda_function.this["discover"].source_code_hash == filebase64sha256("tests/fixtures/handler.zip")
    error_message = "the package hash drives redeploys"
  }
}

run "roles_grant_only_what_each_function_calls" {
  command = apply

  assert {
    condition     = toset(flatten([for s in data.aws_iam_policy_document.discover.statement : s.actions])) == toset(["ec2:DescribeInstances", "ec2:DescribeInstanceTopology", "ec2:DescribeCapacityReservationTopology", "ec2:DescribeCapacityBlockStatus", "s3:GetObject", "s3:PutObject", "s3:ListBucket", "dynamodb:GetItem", "dynamodb:PutItem", "sqs:SendMessage"])
    error_message = "discover's own statements"
  }
  assert {
    condition     = toset(flatten([for s in data.aws_iam_policy_document.render.statement : s.actions])) == toset(["s3:GetObject", "s3:PutObject", "s3:ListBucket", "dynamodb:GetItem", "dynamodb:PutItem", "sqs:SendMessage"])
    error_message = "render's own statements"
  }
  assert {
    condition     = toset(flatten([for s in data.aws_iam_policy_document.publish.statement : s.actions])) == toset(["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket", "ssm:GetParameter", "ssm:PutParameter"])
    error_message = "publish's own statements (no EKS without eks_cluster_name)"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.publish.statement : s.resources if s.sid == "SlurmParameters"]) == toset(["arn:aws:ssm:eu-west-1:111122223333:parameter/topocast/c1/slurm/*"])
    error_message = "publish writes parameters only under the cluster's SSM path"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.discover.statement : s.resources if s.sid == "WriteGraphsAndHold"]) == toset(["${aws_s3_bucket.this.arn}/topocast/c1/graphs/*", "${aws_s3_bucket.this.arn}/topocast/c1/state/guard-hold.json"])
    error_message = "discover writes only graphs/ and the hold record, never state/published.json (what the guard trusts)"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.discover.statement : s.resources if s.sid == "LastGoodAndQuarantine"]) == toset(["${aws_s3_bucket.this.arn}/topocast/c1/last-good/*", "${aws_s3_bucket.this.arn}/topocast/c1/quarantine/*"])
    error_message = "discover keeps last good uploads and quarantined ones in their own areas"
  }
  assert {
    condition     = length([for s in data.aws_iam_policy_document.discover.statement : s if s.sid == "QuarantineUploads"]) == 0
    error_message = "without on-prem uploads discover may not delete anything"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.render.statement : s.resources if s.sid == "TimerAndPublish"]) == toset([aws_sqs_queue.main["timer"].arn, aws_sqs_queue.main["publish"].arn])
    error_message = "render sends to the timer and publish queues only"
  }
  assert {
    condition     = alltrue([for k in ["discover", "render", "publish"] : one([for s in data.aws_iam_policy_document.platform[k].statement : s.resources if s.sid == "QueueTrigger"]) == toset([aws_sqs_queue.main[local.triggers[k].queue].arn])])
    error_message = "each role may receive only from its own queue"
  }
  assert {
    condition     = alltrue([for k in ["discover", "render", "publish"] : one([for s in data.aws_iam_policy_document.platform[k].statement : s.resources if s.sid == "OwnLogGroup"]) == toset(["${aws_cloudwatch_log_group.this[k].arn}:*"])])
    error_message = "each role may write only its own log group"
  }
  assert {
    condition     = length(aws_eks_access_entry.publish) == 0
    error_message = "no EKS access entry without eks_cluster_name"
  }
}

run "eks_and_customer_key_add_their_grants" {
  command = apply

  variables {
    publishers       = ["kubernetes"]
    eks_cluster_name = "gpu-eks"
    kms_key_arn      = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
  }

  assert {
    condition     = one([for s in data.aws_iam_policy_document.publish.statement : s.actions if s.sid == "EksEndpoint"]) == toset(["eks:DescribeCluster"])
    error_message = "the publish role must be able to describe its EKS cluster"
  }
  assert {
    condition     = aws_eks_access_entry.publish[0].principal_arn == aws_iam_role.this["publish"].arn && aws_eks_access_entry.publish[0].kubernetes_groups == toset(["topocast:publishers"])
    error_message = "the access entry maps the publish role to the RBAC group of infra/k8s/rbac.yaml"
  }
  assert {
    condition     = length(aws_eks_access_policy_association.publish) == 0
    error_message = "no access policy unless asked for"
  }
  assert {
    condition     = jsondecode(aws_lambda_function.this["publish"].environment[0].variables["TOPOCAST_K8S_OPTIONS"]).connection == { eks_cluster = "gpu-eks", region = "eu-west-1" }
    error_message = "the publisher is told which EKS cluster to use"
  }
  assert {
    condition     = alltrue([for k in ["discover", "render", "publish"] : one([for s in data.aws_iam_policy_document.platform[k].statement : s.actions if s.sid == "CustomerKey"]) == toset(["kms:Decrypt", "kms:GenerateDataKey"])])
    error_message = "with a customer key every role may use it"
  }
  assert {
    condition     = one(one(aws_s3_bucket_server_side_encryption_configuration.this.rule).apply_server_side_encryption_by_default).sse_algorithm == "aws:kms"
    error_message = "the bucket uses the customer key"
  }
  assert {
    condition     = alltrue([for q in aws_sqs_queue.main : q.kms_master_key_id == var.kms_key_arn])
    error_message = "the queues use the customer key"
  }
}

run "alarms_watch_dead_letters_errors_and_held_publishes" {
  command = apply

  variables {
    alarm_topic_arn = "arn:aws:sns:eu-west-1:111122223333:ops"
  }

  assert {
    condition     = alltrue([for k, a in aws_cloudwatch_metric_alarm.dlq : a.dimensions.QueueName == aws_sqs_queue.dlq[k].name && a.threshold == 0 && a.comparison_operator == "GreaterThanThreshold"])
    error_message = "one alarm per DLQ, firing on the first message"
  }
  assert {
    condition     = alltrue([for k, a in aws_cloudwatch_metric_alarm.errors : a.dimensions.FunctionName == aws_lambda_function.this[k].function_name && a.metric_name == "Errors"])
    error_message = "one error alarm per function"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.publish_held[0].namespace == "topocast" && aws_cloudwatch_metric_alarm.publish_held[0].metric_name == "PublishHeld" && aws_cloudwatch_metric_alarm.publish_held[0].dimensions["service"] == "topocast" && length(aws_cloudwatch_metric_alarm.publish_held[0].dimensions) == 1
    error_message = "the held-publish alarm watches the EMF metric the publish function emits"
  }
  assert {
    condition     = alltrue([for a in concat(values(aws_cloudwatch_metric_alarm.dlq), values(aws_cloudwatch_metric_alarm.errors)) : a.alarm_actions == toset(["arn:aws:sns:eu-west-1:111122223333:ops"])])
    error_message = "alarms notify the given topic"
  }
}

run "on_prem_uploads_drive_discover" {
  command = apply

  variables {
    topology_source   = "ibnetdiscover"
    ib_host_regex     = "(?P<host>\\S+) HCA-\\d+"
    ib_port_selection = { hcas = ["mlx5_[0-7]", "!mlx5_8"], switches = ["!STOR-*"] }
  }

  assert {
    condition     = aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_IB_HCAS"] == "mlx5_[0-7];!mlx5_8" && aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_IB_SWITCHES"] == "!STOR-*" && !contains(keys(aws_lambda_function.this["discover"].environment[0].variables), "TOPOCAST_IB_GUIDS")
    error_message = "the port selection reaches discover as ';'-separated patterns; an empty list sets nothing"
  }

  assert {
    condition     = aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_PROVIDER"] == "ibnetdiscover" && !contains(keys(aws_lambda_function.this["render"].environment[0].variables), "TOPOCAST_PROVIDER")
    error_message = "only discover is told the topology source"
  }
  assert {
    condition     = aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_IB_HOST_REGEX"] == "(?P<host>\\S+) HCA-\\d+" && length([for k in keys(aws_lambda_function.this["discover"].environment[0].variables) : k if startswith(k, "TOPOCAST_NETQ_") || k == "TOPOCAST_DOMAINS_URI"]) == 0
    error_message = "ibnetdiscover gets its host regex and no NetQ or domains settings it was not given"
  }
  assert {
    condition     = keys(aws_cloudwatch_event_rule.this) == ["reconcile"] && !contains(flatten([for s in data.aws_iam_policy_document.discover.statement : s.actions]), "ec2:DescribeInstances")
    error_message = "an on-prem fabric needs no EC2 rule and no EC2 grant"
  }
  assert {
    condition     = length(aws_s3_bucket_notification.this) == 1 && one(aws_s3_bucket_notification.this[0].queue).events == toset(["s3:ObjectCreated:*"])
    error_message = "ibnetdiscover needs the upload notifications even without enable_upload_events"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.discover.statement : s.resources if s.sid == "QuarantineUploads"]) == toset(["${aws_s3_bucket.this.arn}/topocast/c1/uploads/*"])
    error_message = "discover may delete only uploads (moving a bad one to quarantine/)"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.events_queue.statement : s.principals if s.sid == "BucketUploads"]) != null
    error_message = "the events queue must accept the bucket's notifications"
  }
}

# NetQ sends no events: discover runs on the reconcile schedule, reads the credentials from the one
# secret it may read (decrypted with the customer key through Secrets Manager only) and the domains
# file from the module's bucket.
run "netq_reconciles_on_a_schedule_with_its_secret" {
  command = apply

  variables {
    topology_source              = "netq"
    netq_url                     = "https://netq.example.com"
    netq_credentials_arn         = "arn:aws:secretsmanager:us-east-1:111122223333:secret:topocast/netq-AbCdEf"
    netq_credentials_kms_key_arn = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    netq_premises                = ["dc-a", "7"]
    domains_uri                  = "s3://mock-bucket/topocast/c1/uploads/domains.csv"
    reconcile_schedule           = "rate(10 minutes)"
  }

  assert {
    condition = { for k, v in aws_lambda_function.this["discover"].environment[0].variables : k => v if can(regex("^TOPOCAST_(PROVIDER|NETQ_.*|DOMAINS_URI|IB_HOST_REGEX)$", k)) } == {
      TOPOCAST_PROVIDER         = "netq"
      TOPOCAST_NETQ_URL         = "https://netq.example.com"
      TOPOCAST_NETQ_CREDENTIALS = "arn:aws:secretsmanager:us-east-1:111122223333:secret:topocast/netq-AbCdEf"
      TOPOCAST_NETQ_PREMISES    = "dc-a;7"
      TOPOCAST_DOMAINS_URI      = "s3://mock-bucket/topocast/c1/uploads/domains.csv"
    }
    error_message = "discover gets the NetQ URL, the credentials ARN (never the credentials), the premises joined with ';' and the domains URI"
  }
  assert {
    condition     = alltrue([for k in ["render", "publish"] : length([for v in keys(aws_lambda_function.this[k].environment[0].variables) : v if startswith(v, "TOPOCAST_NETQ_") || v == "TOPOCAST_DOMAINS_URI"]) == 0])
    error_message = "render and publish get no NetQ settings"
  }
  assert {
    condition     = keys(aws_cloudwatch_event_rule.this) == ["reconcile"] && aws_cloudwatch_event_rule.this["reconcile"].schedule_expression == "rate(10 minutes)" && aws_cloudwatch_event_target.this["reconcile"].arn == aws_sqs_queue.main["events"].arn
    error_message = "netq is driven by the reconcile schedule alone: no EC2 or Auto Scaling rule"
  }
  assert {
    condition     = one(one([for s in data.aws_iam_policy_document.events_queue.statement : s.condition if s.sid == "EventBridgeRules"])).values == tolist(["arn:aws:events:eu-west-1:111122223333:rule/topocast-c1-reconcile"])
    error_message = "the events queue admits only the reconcile rule"
  }
  assert {
    condition     = toset(flatten([for s in data.aws_iam_policy_document.discover.statement : s.actions])) == toset(["s3:GetObject", "s3:PutObject", "s3:ListBucket", "dynamodb:GetItem", "dynamodb:PutItem", "sqs:SendMessage", "secretsmanager:GetSecretValue", "kms:Decrypt"])
    error_message = "netq's discover role: no EC2, the secret and its key, no SSM"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.discover.statement : s.resources if s.sid == "NetqCredentialsSecret"]) == toset(["arn:aws:secretsmanager:us-east-1:111122223333:secret:topocast/netq-AbCdEf"])
    error_message = "discover may read exactly the credentials secret"
  }
  assert {
    condition = toset([for c in one([for s in data.aws_iam_policy_document.discover.statement : s.condition if s.sid == "NetqCredentialsKey"]) : "${c.test} ${c.variable} ${join(",", c.values)}"]) == toset([
      "StringEquals kms:ViaService secretsmanager.us-east-1.amazonaws.com",
      "StringEquals kms:EncryptionContext:SecretARN arn:aws:secretsmanager:us-east-1:111122223333:secret:topocast/netq-AbCdEf",
    ])
    error_message = "the customer key may decrypt only through Secrets Manager in the secret's region, only that secret"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.discover.statement : s.resources if s.sid == "ReadGraphsAndState"]) == toset(["arn:aws:s3:::mock-bucket/topocast/c1/graphs/*", "arn:aws:s3:::mock-bucket/topocast/c1/rendered/*", "arn:aws:s3:::mock-bucket/topocast/c1/state/*", "arn:aws:s3:::mock-bucket/topocast/c1/uploads/domains.csv"])
    error_message = "discover may read the domains object, not the rest of uploads/ (no upload events)"
  }
  assert {
    condition     = length(aws_s3_bucket_notification.this) == 0
    error_message = "netq needs no upload notifications unless enable_upload_events is set"
  }
}

run "netq_credentials_and_domains_in_ssm" {
  command = apply

  variables {
    topology_source      = "netq"
    netq_url             = "https://netq.example.com/"
    netq_credentials_arn = "arn:aws:ssm:eu-west-1:111122223333:parameter/topocast/c1/netq"
    domains_uri          = "ssm:///topocast/c1/domains"
    enable_upload_events = true
  }

  assert {
    condition     = one([for s in data.aws_iam_policy_document.discover.statement : s.resources if s.sid == "NetqCredentialsParameter"]) == toset(["arn:aws:ssm:eu-west-1:111122223333:parameter/topocast/c1/netq"]) && one([for s in data.aws_iam_policy_document.discover.statement : s.actions if s.sid == "NetqCredentialsParameter"]) == toset(["ssm:GetParameter"])
    error_message = "discover may read exactly the credentials parameter"
  }
  assert {
    condition     = one([for s in data.aws_iam_policy_document.discover.statement : s.resources if s.sid == "DomainsParameter"]) == toset(["arn:aws:ssm:eu-west-1:111122223333:parameter/topocast/c1/domains"])
    error_message = "ssm:///topocast/c1/domains is the parameter /topocast/c1/domains of the module's region"
  }
  assert {
    condition     = !contains(flatten([for s in data.aws_iam_policy_document.discover.statement : s.actions]), "secretsmanager:GetSecretValue") && !contains(flatten([for s in data.aws_iam_policy_document.discover.statement : s.actions]), "kms:Decrypt")
    error_message = "an SSM parameter needs no Secrets Manager grant, and no KMS grant without a customer key"
  }
  assert {
    condition     = aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_DOMAINS_URI"] == "ssm:///topocast/c1/domains" && !contains(keys(aws_lambda_function.this["discover"].environment[0].variables), "TOPOCAST_NETQ_PREMISES")
    error_message = "the domains URI is passed as given; no premises means the variable is left out (all premises)"
  }
  assert {
    condition     = keys(aws_cloudwatch_event_rule.this) == ["reconcile"] && length(aws_s3_bucket_notification.this) == 1
    error_message = "with upload events on, an upload (a new domains file) also starts a discovery"
  }
}

# (a generated bucket name is only known at apply, so the module checks this on the function)
run "domains_file_must_be_in_the_module_bucket" {
  command = plan

  variables {
    topology_source = "ibnetdiscover"
    domains_uri     = "s3://someone-elses-bucket/topocast/c1/uploads/domains.csv"
  }

  expect_failures = [aws_lambda_function.this["discover"]]
}

run "a_k8s_labels_overlay_reaches_the_cluster_like_the_publisher" {
  command = apply

  variables {
    publishers       = ["kubernetes"]
    eks_cluster_name = "gpu-eks"
    overlays         = ["k8s-labels:domain=nvidia.com/gpu.clique"]
  }

  assert {
    condition     = aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_OVERLAYS"] == "k8s-labels:domain=nvidia.com/gpu.clique" && aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_PROVIDER"] == "aws"
    error_message = "discover keeps EC2 as its source and gets the overlay"
  }
  assert {
    condition     = jsondecode(aws_lambda_function.this["discover"].environment[0].variables["TOPOCAST_K8S_OPTIONS"]).connection == { eks_cluster = "gpu-eks", region = "eu-west-1" } && aws_eks_access_entry.discover[0].principal_arn == aws_iam_role.this["discover"].arn
    error_message = "the overlay lists the nodes of the publisher's EKS cluster, with its own access entry"
  }
}
