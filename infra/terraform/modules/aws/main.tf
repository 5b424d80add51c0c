# Names, key layout and the environment each function reads.
#
#   EventBridge (EC2 state, ASG, schedule), S3 uploads -> SQS events  -> discover -> S3 graphs/ + DynamoDB debounce
#   SQS timer (delayed messages = debounce timers)      -> render    -> S3 rendered/ -> SQS publish
#   SQS publish                                         -> publish   -> SSM <ssm path> (+ S3 published/), Kubernetes
#
# EC2 state and ASG rules exist only with topology_source = aws; netq runs on the schedule alone.

data "aws_partition" "current" {}
data "aws_region" "current" {}
data "aws_caller_identity" "current" {}

locals {
  name      = "${var.name_prefix}-${var.cluster}"
  functions = toset(["discover", "render", "publish"])

  partition  = data.aws_partition.current.partition
  region     = data.aws_region.current.name
  account_id = data.aws_caller_identity.current.account_id

  # Object layout (shared/topocast/aws/*): <prefix>/<cluster>/graphs|rendered|published|state|uploads/
  key_base      = "${var.prefix}/${var.cluster}"
  uploads_key   = "${local.key_base}/uploads/"
  published_key = "${local.key_base}/published/"

  ssm_path                 = coalesce(var.ssm_prefix, "/topocast/${var.cluster}/slurm")
  guard_override_parameter = coalesce(var.guard_override_parameter, "/topocast/${var.cluster}/guard/allow-generation")
  ec2_filters              = coalesce(var.ec2_filters, ["tag:topocast:cluster=${var.cluster}"])

  # The EKS connection is filled in so users do not repeat the cluster name and region. (JSON on
  # both branches: the objects have different attributes, which a conditional does not allow.)
  k8s_options_json = var.eks_cluster_name == null ? jsonencode(var.k8s_options) : jsonencode(merge(var.k8s_options, {
    connection = merge(try(var.k8s_options.connection, {}), { eks_cluster = var.eks_cluster_name, region = local.region })
  }))

  # topology_source = k8s-labels: discover lists the nodes of the cluster the publisher writes to. The
  # EKS endpoint comes from eks:DescribeCluster unless k8s_options.connection.endpoint is given.
  node_source = var.topology_source == "k8s-labels"
  # an overlay on the node labels (overlays = ["k8s-labels:..."]) reaches the cluster the same way
  k8s_reader          = local.node_source || anytrue([for o in var.overlays : startswith(o, "k8s-labels:")])
  discover_eks_lookup = local.k8s_reader && var.eks_cluster_name != null && try(var.k8s_options.connection.endpoint, null) == null

  render_options_json = length(var.render_options) > 0 ? jsonencode(var.render_options) : ""

  # On-prem collectors upload ibnetdiscover dumps; their S3 events trigger discover.
  upload_events = var.enable_upload_events || var.topology_source == "ibnetdiscover"
  # EC2 and Auto Scaling events (and the EC2 grants) only mean something when EC2 is the source. NetQ
  # sends no events at all: the reconcile schedule is its only trigger (uploads too, if enabled).
  ec2_source = var.topology_source == "aws"

  # On-prem inputs (validated in variables.tf). coalesce() keeps null away from functions in both branches.
  netq_credentials_parts   = split(":", coalesce(var.netq_credentials_arn, "arn:none:none:none"))
  netq_credentials_service = var.netq_credentials_arn == null ? null : local.netq_credentials_parts[2] # secretsmanager | ssm
  netq_credentials_region  = local.netq_credentials_parts[3]
  # ssm:///name -> parameter /name (topocast.agents.pull.fetch); s3://<bucket>/<key> -> that object of the bucket
  domains_parameter = startswith(coalesce(var.domains_uri, "none"), "ssm:///") ? trimprefix(coalesce(var.domains_uri, "none"), "ssm://") : null
  domains_key       = startswith(coalesce(var.domains_uri, "none"), "s3://") ? replace(coalesce(var.domains_uri, "none"), "/^s3://[^/]+//", "") : null

  common_tags = merge(var.tags, { "topocast:cluster" = var.cluster })

  # ----- environment: exactly the variables shared/topocast/config.py (ENV_VARS) reads ---------------
  common_env = {
    TOPOCAST_CLUSTER             = var.cluster
    TOPOCAST_BUCKET              = aws_s3_bucket.this.id
    TOPOCAST_PREFIX              = var.prefix
    POWERTOOLS_SERVICE_NAME      = "topocast"
    POWERTOOLS_METRICS_NAMESPACE = "topocast"
    POWERTOOLS_LOG_LEVEL         = var.log_level
  }
  stage_env = {
    discover = {
      TOPOCAST_PROVIDER                  = var.topology_source
      TOPOCAST_STATE_TABLE               = aws_dynamodb_table.debounce.name
      TOPOCAST_TIMER_QUEUE_URL           = aws_sqs_queue.main["timer"].url
      TOPOCAST_DEBOUNCE_QUIET_SECONDS    = tostring(var.debounce_quiet_seconds)
      TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS = tostring(var.debounce_max_wait_seconds)
      TOPOCAST_DEBOUNCE_LEADING_EDGE     = tostring(var.debounce_leading_edge)
      TOPOCAST_FILTERS                   = join(";", local.ec2_filters)
      TOPOCAST_NAME_FROM                 = var.name_from
      TOPOCAST_INSTANCE_TYPES            = join(";", var.instance_types)
      TOPOCAST_ZONES                     = join(";", var.zones)
      TOPOCAST_FULL_SCAN_THRESHOLD       = tostring(var.full_scan_threshold)
      TOPOCAST_DLQ_URL                   = aws_sqs_queue.dlq["events"].url
      # a discovery that sets aside more than this share of the nodes fails (the last good graph stays)
      TOPOCAST_GUARD_MAX_LOSS = tostring(var.guard_max_loss)
      # host maintenance / restarts: delayed re-checks go back to discover's own queue
      TOPOCAST_EVENTS_QUEUE_URL        = aws_sqs_queue.main["events"].url
      TOPOCAST_FOLLOW_RECHECKS         = tostring(var.follow_rechecks)
      TOPOCAST_FOLLOW_INTERVAL_SECONDS = tostring(var.follow_interval_seconds)
      # a reconcile that confirms a held publish hands the latest manifest to publish
      TOPOCAST_PUBLISH_QUEUE_URL = aws_sqs_queue.main["publish"].url
      # on-prem fabrics; variables.tf only lets these be set with the topology_source that reads them
      TOPOCAST_NETQ_URL         = var.netq_url == null ? "" : var.netq_url
      TOPOCAST_NETQ_CREDENTIALS = var.netq_credentials_arn == null ? "" : var.netq_credentials_arn
      TOPOCAST_NETQ_PREMISES    = join(";", var.netq_premises)
      TOPOCAST_DOMAINS_URI      = var.domains_uri == null ? "" : var.domains_uri
      TOPOCAST_IB_HOST_REGEX    = var.ib_host_regex == null ? "" : var.ib_host_regex
      # the compute fabric's ports on a dual-fabric (compute + storage) dump or premise
      TOPOCAST_IB_HCAS     = join(";", var.ib_port_selection.hcas)
      TOPOCAST_IB_GUIDS    = join(";", var.ib_port_selection.guids)
      TOPOCAST_IB_SWITCHES = join(";", var.ib_port_selection.switches)
      # k8s-labels: the label scheme, and the cluster connection the publisher uses
      TOPOCAST_NODE_LABELS = local.node_source && length(var.node_labels) > 0 ? jsonencode(var.node_labels) : ""
      TOPOCAST_K8S_OPTIONS = local.k8s_reader && local.k8s_options_json != "{}" ? local.k8s_options_json : ""
      # merged sources after the provider (providers/overlay.py), e.g. the NVLink cliques from node labels
      TOPOCAST_OVERLAYS = join(";", var.overlays)
    }
    render = {
      TOPOCAST_STATE_TABLE               = aws_dynamodb_table.debounce.name
      TOPOCAST_TIMER_QUEUE_URL           = aws_sqs_queue.main["timer"].url
      TOPOCAST_DEBOUNCE_QUIET_SECONDS    = tostring(var.debounce_quiet_seconds)
      TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS = tostring(var.debounce_max_wait_seconds)
      TOPOCAST_DEBOUNCE_LEADING_EDGE     = tostring(var.debounce_leading_edge)
      TOPOCAST_FORMATS                   = join(";", var.formats)
      TOPOCAST_RENDER_OPTIONS            = local.render_options_json
      TOPOCAST_SLURM_VERSION             = var.slurm_version == null ? "" : var.slurm_version
      TOPOCAST_PUBLISH_QUEUE_URL         = aws_sqs_queue.main["publish"].url
    }
    publish = {
      TOPOCAST_PUBLISHERS               = join(";", var.publishers)
      TOPOCAST_SSM_PREFIX               = local.ssm_path
      TOPOCAST_SSM_ADVANCED_TIER        = tostring(var.ssm_advanced_tier)
      TOPOCAST_GUARD_MAX_LOSS           = tostring(var.guard_max_loss)
      TOPOCAST_GUARD_OVERRIDE_PARAMETER = local.guard_override_parameter
      TOPOCAST_K8S_OPTIONS              = local.k8s_options_json == "{}" ? "" : local.k8s_options_json
      TOPOCAST_SLURMREST_URL            = var.slurmrest_url == null ? "" : var.slurmrest_url
      TOPOCAST_SLURMREST_TOKEN          = var.slurmrest_token_arn == null ? "" : var.slurmrest_token_arn
      TOPOCAST_SLURMREST_MAX_SHARE      = contains(var.publishers, "slurmrestd") ? tostring(var.slurmrest_max_share) : ""
      # the Kubernetes publisher owns the label keys of render's label scheme
      TOPOCAST_RENDER_OPTIONS = local.render_options_json
    }
  }
  # Empty values are left out: the code then applies its own default.
  function_env = {
    for fn in local.functions : fn => {
      for k, v in merge(local.common_env, local.stage_env[fn]) : k => v if v != ""
    }
  }
}
