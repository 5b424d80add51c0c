# One role per function, granting only the AWS API actions that function's code calls, on only the
# resources it touches. The action lists must equal shared/topocast/aws/iam.py (CALLS); the wiring test
# (tests/test_infra_wiring.py) checks that and that the code really calls each action. Actions only one
# configuration needs (iam.py CONDITIONAL) sit in `dynamic "statement"` blocks gated on that input.
#
# s3:ListBucket is granted with s3:GetObject although no function lists: without it S3 answers a read
# of a missing key (an empty store, no published state yet) with 403 instead of 404.

locals {
  bucket_arn = aws_s3_bucket.this.arn
  objects    = { for area in ["graphs", "rendered", "published", "state", "uploads", "quarantine", "last-good"] : area => "${local.bucket_arn}/${local.key_base}/${area}/*" }
  ssm_arn    = "arn:${local.partition}:ssm:${local.region}:${local.account_id}:parameter"
  eks_arn    = var.eks_cluster_name == null ? null : "arn:${local.partition}:eks:${local.region}:${local.account_id}:cluster/${var.eks_cluster_name}"

  # on-prem inputs discover reads (main.tf): the s3:// domains object, the ssm:// domains parameter
  domains_object_arn    = local.domains_key == null ? "" : "${local.bucket_arn}/${local.domains_key}"
  domains_parameter_arn = local.domains_parameter == null ? null : "${local.ssm_arn}${local.domains_parameter}"
  # Secrets Manager and SSM decrypt with the caller's kms:Decrypt, naming the secret/parameter in the
  # encryption context: the grant is limited to that service and that one ARN.
  netq_kms_context = local.netq_credentials_service == "secretsmanager" ? "kms:EncryptionContext:SecretARN" : "kms:EncryptionContext:PARAMETER_ARN"
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "this" {
  for_each = local.functions

  name               = "${local.name}-${each.key}"
  description        = "topocast ${each.key} function of cluster ${var.cluster}"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = local.common_tags
}

# ----- what every function needs from the platform: its log group, the queue trigger, the CMK, the VPC -----
data "aws_iam_policy_document" "platform" {
  for_each = local.functions

  statement {
    sid       = "OwnLogGroup"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.this[each.key].arn}:*"]
  }

  statement {
    sid       = "QueueTrigger"
    actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]
    resources = [aws_sqs_queue.main[local.triggers[each.key].queue].arn]
  }

  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [var.kms_key_arn]
    content {
      sid       = "CustomerKey"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = length(var.vpc_subnet_ids) == 0 ? [] : [1]
    content {
      # ENI management for VPC functions (what AWSLambdaVPCAccessExecutionRole grants); these
      # actions do not support resource-level permissions.
      sid = "VpcNetworkInterfaces"
      actions = [
        "ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
      ]
      resources = ["*"]
    }
  }
}

# ----- discover: EC2 -> graph generations in S3, debounce timer --------------------------------------------
data "aws_iam_policy_document" "discover" {
  source_policy_documents = [data.aws_iam_policy_document.platform["discover"].json]

  dynamic "statement" {
    for_each = local.ec2_source ? [1] : []
    content {
      sid = "DescribeCluster"
      # None of these supports resource-level permissions. DescribeCapacityReservationTopology places
      # reserved, not-yet-launched nodes (TOPOCAST_RESERVED_NODES); DescribeCapacityBlockStatus reads
      # capacity block health (provider option capacity_block_health).
      actions = [
        "ec2:DescribeInstances", "ec2:DescribeInstanceTopology", "ec2:DescribeCapacityReservationTopology",
        "ec2:DescribeCapacityBlockStatus",
      ]
      resources = ["*"]
    }
  }

  # topology_source = k8s-labels on EKS without a given endpoint: the API server URL and CA
  # (topocast.k8s.auth.eks_cluster_endpoint); listing the nodes is Kubernetes RBAC (eks.tf access entry)
  dynamic "statement" {
    for_each = local.discover_eks_lookup ? [local.eks_arn] : []
    content {
      sid       = "EksEndpoint"
      actions   = ["eks:DescribeCluster"]
      resources = [statement.value]
    }
  }

  statement {
    # graphs/; rendered/ and state/ when a reconcile confirms a held publish; uploads/ for on-prem dumps;
    # an s3:// domains file (variables.tf keeps it under uploads/, so uploads/* covers it when granted)
    sid     = "ReadGraphsAndState"
    actions = ["s3:GetObject"]
    resources = distinct(compact([
      local.objects.graphs, local.objects.rendered, local.objects.state,
      local.upload_events ? local.objects.uploads : local.domains_object_arn,
    ]))
  }

  statement {
    # the hold record only: state/published.json is what the guard trusts, and only publish writes it
    sid       = "WriteGraphsAndHold"
    actions   = ["s3:PutObject"]
    resources = [local.objects.graphs, "${local.bucket_arn}/${local.key_base}/state/guard-hold.json"]
  }

  statement {
    sid       = "MissingKeysAre404"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
  }

  # on-prem uploads: a bad upload is moved to quarantine/ (copy + delete), each host's last good one is
  # kept in last-good/ and read back when its upload is bad (topocast.agents.collect.read_good_uploads)
  dynamic "statement" {
    for_each = local.upload_events ? [1] : []
    content {
      sid       = "QuarantineUploads"
      actions   = ["s3:DeleteObject"]
      resources = [local.objects.uploads]
    }
  }

  statement {
    sid       = "LastGoodAndQuarantine"
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = [local.objects["last-good"], local.objects.quarantine]
  }

  statement {
    sid       = "DebounceState"
    actions   = ["dynamodb:GetItem", "dynamodb:PutItem"]
    resources = [aws_dynamodb_table.debounce.arn]
  }

  statement {
    sid     = "TimerDeadLetterPublish"
    actions = ["sqs:SendMessage"]
    # the events queue: delayed re-checks of followed instances (topocast/Recheck)
    resources = [
      aws_sqs_queue.main["timer"].arn, aws_sqs_queue.dlq["events"].arn, aws_sqs_queue.main["publish"].arn,
      aws_sqs_queue.main["events"].arn,
    ]
  }

  # topology_source = netq: the credentials, read by topocast.providers.onprem.netq.load_credentials
  dynamic "statement" {
    for_each = local.netq_credentials_service == "secretsmanager" ? [var.netq_credentials_arn] : []
    content {
      sid       = "NetqCredentialsSecret"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = local.netq_credentials_service == "ssm" ? [var.netq_credentials_arn] : []
    content {
      sid       = "NetqCredentialsParameter"
      actions   = ["ssm:GetParameter"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = var.netq_credentials_kms_key_arn == null ? [] : [var.netq_credentials_kms_key_arn]
    content {
      sid       = "NetqCredentialsKey"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["${local.netq_credentials_service}.${local.netq_credentials_region}.amazonaws.com"]
      }
      condition {
        test     = "StringEquals"
        variable = local.netq_kms_context
        values   = [var.netq_credentials_arn]
      }
    }
  }

  # ibnetdiscover / netq with domains_uri = ssm:///<name> (topocast.agents.pull.fetch)
  dynamic "statement" {
    for_each = local.domains_parameter_arn == null ? [] : [local.domains_parameter_arn]
    content {
      sid       = "DomainsParameter"
      actions   = ["ssm:GetParameter"]
      resources = [statement.value]
    }
  }
}

# ----- render: graph generation -> rendered files, next stage ----------------------------------------------
data "aws_iam_policy_document" "render" {
  source_policy_documents = [data.aws_iam_policy_document.platform["render"].json]

  statement {
    sid       = "ReadGraphsRenderedState"
    actions   = ["s3:GetObject"]
    resources = [local.objects.graphs, local.objects.rendered, local.objects.state]
  }

  statement {
    sid       = "WriteRendered"
    actions   = ["s3:PutObject"]
    resources = [local.objects.rendered]
  }

  statement {
    sid       = "MissingKeysAre404"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
  }

  statement {
    sid       = "DebounceState"
    actions   = ["dynamodb:GetItem", "dynamodb:PutItem"]
    resources = [aws_dynamodb_table.debounce.arn]
  }

  statement {
    sid       = "TimerAndPublish"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.main["timer"].arn, aws_sqs_queue.main["publish"].arn]
  }
}

# ----- publish: guard + SSM parameters (+ S3 copies of large values) + Kubernetes ---------------------------
data "aws_iam_policy_document" "publish" {
  source_policy_documents = [data.aws_iam_policy_document.platform["publish"].json]

  statement {
    sid       = "ReadGraphsRenderedState"
    actions   = ["s3:GetObject"]
    resources = [local.objects.graphs, local.objects.rendered, local.objects.state]
  }

  statement {
    sid       = "WritePublishedAndState"
    actions   = ["s3:PutObject"]
    resources = [local.objects.published, local.objects.state]
  }

  statement {
    sid       = "ClearGuardHold"
    actions   = ["s3:DeleteObject"]
    resources = [local.objects.state]
  }

  statement {
    sid       = "MissingKeysAre404"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
  }

  statement {
    sid       = "SlurmParameters"
    actions   = ["ssm:GetParameter", "ssm:PutParameter"]
    resources = ["${local.ssm_arn}${local.ssm_path}/*"]
  }

  statement {
    sid       = "GuardOverride"
    actions   = ["ssm:GetParameter"]
    resources = ["${local.ssm_arn}${local.guard_override_parameter}"]
  }

  # publishers = slurmrestd: the Slurm JWT (topocast.slurm.rest_token.read_token); the baseline is under state/
  dynamic "statement" {
    for_each = var.slurmrest_token_arn == null ? [] : [var.slurmrest_token_arn]
    content {
      sid       = "SlurmRestTokenSecret"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [statement.value]
    }
  }

  dynamic "statement" {
    for_each = local.eks_arn == null ? [] : [local.eks_arn]
    content {
      sid       = "EksEndpoint"
      actions   = ["eks:DescribeCluster"]
      resources = [statement.value]
    }
  }
}

locals {
  role_policies = {
    discover = data.aws_iam_policy_document.discover.json
    render   = data.aws_iam_policy_document.render.json
    publish  = data.aws_iam_policy_document.publish.json
  }
}

resource "aws_iam_role_policy" "this" {
  for_each = local.functions

  name   = "topocast-${each.key}"
  role   = aws_iam_role.this[each.key].id
  policy = local.role_policies[each.key]
}

# ----- the Slurm head node's pull agent (topocast pull) -------------------------------------------------------
data "aws_iam_policy_document" "pull_agent" {
  statement {
    sid       = "ReadSlurmParameters"
    actions   = ["ssm:GetParameter"]
    resources = ["${local.ssm_arn}${local.ssm_path}/*"]
  }

  statement {
    sid       = "ReadLargeValues"
    actions   = ["s3:GetObject"]
    resources = [local.objects.published]
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

resource "aws_iam_policy" "pull_agent" {
  count = var.create_pull_agent_policy ? 1 : 0

  name        = "${local.name}-pull-agent"
  description = "Read the topocast Slurm files of cluster ${var.cluster} (attach to the head node's role)"
  policy      = data.aws_iam_policy_document.pull_agent.json
  tags        = local.common_tags
}
