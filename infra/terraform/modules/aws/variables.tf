# Inputs of the topocast AWS module. Every setting the functions read is a variable here and reaches
# them as the TOPOCAST_* environment variable named in its description (see shared/topocast/config.py).
# Defaults equal the code's defaults; tests/test_infra_wiring.py checks that they stay equal.

# ----- identity ---------------------------------------------------------------------------------------
variable "cluster" {
  description = "Cluster name: names resources, keys in the bucket, the SSM path and the graph (TOPOCAST_CLUSTER)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$", var.cluster))
    error_message = "cluster must be 1-32 characters of a-z, 0-9 and '-', starting and ending with a letter or digit."
  }
}

variable "name_prefix" {
  description = "Prefix of every resource name; resources are called <name_prefix>-<cluster>-<role>."
  type        = string
  default     = "topocast"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{0,15}$", var.name_prefix))
    error_message = "name_prefix must be 1-16 characters of a-z, 0-9 and '-', starting with a letter."
  }
}

variable "tags" {
  description = "Tags added to every resource that takes tags."
  type        = map(string)
  default     = {}
}

# ----- function packages (topocast package / make package) --------------------------------------------
variable "function_packages" {
  description = "Paths of the Lambda zips built by `make package` (dist/aws/<function>.zip). A function is redeployed when its zip's hash changes."
  type = object({
    discover = string
    render   = string
    publish  = string
  })

  validation {
    condition     = alltrue([for p in values(var.function_packages) : endswith(p, ".zip") && fileexists(p)])
    error_message = "function_packages must name existing .zip files; build them with `make package` (dist/aws/*.zip)."
  }
}

variable "lambda_runtime" {
  description = "Lambda runtime; must match the --python-version the packages were built for (3.12 by default)."
  type        = string
  default     = "python3.12"

  validation {
    condition     = contains(["python3.11", "python3.12", "python3.13"], var.lambda_runtime)
    error_message = "lambda_runtime must be python3.11, python3.12 or python3.13."
  }
}

variable "lambda_architecture" {
  description = "Lambda CPU architecture; must match the --platform the packages were built for."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.lambda_architecture)
    error_message = "lambda_architecture must be x86_64 or arm64."
  }
}

variable "lambda_memory_mb" {
  description = "Memory per function in MB (CPU scales with it)."
  type = object({
    discover = optional(number, 512)
    render   = optional(number, 1024)
    publish  = optional(number, 512)
  })
  default = {}

  validation {
    condition     = alltrue([for m in values(var.lambda_memory_mb) : m >= 128 && m <= 10240])
    error_message = "lambda_memory_mb values must be between 128 and 10240."
  }
}

variable "lambda_timeout_seconds" {
  description = "Timeout per function in seconds. Each queue's visibility timeout is set to 6x its consumer's timeout, as AWS recommends."
  type = object({
    discover = optional(number, 300)
    render   = optional(number, 120)
    publish  = optional(number, 300)
  })
  default = {}

  validation {
    condition     = alltrue([for t in values(var.lambda_timeout_seconds) : t >= 10 && t <= 900])
    error_message = "lambda_timeout_seconds values must be between 10 and 900."
  }
}

variable "log_level" {
  description = "Log level of the functions (POWERTOOLS_LOG_LEVEL)."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR"], var.log_level)
    error_message = "log_level must be DEBUG, INFO, WARNING or ERROR."
  }
}

variable "log_retention_days" {
  description = "Retention of the functions' CloudWatch log groups."
  type        = number
  default     = 30

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a value CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, ... 3653)."
  }
}

variable "vpc_subnet_ids" {
  description = "Run the functions in these subnets (e.g. to reach a private EKS endpoint). They need a route to the AWS APIs (NAT or VPC endpoints). Empty: no VPC."
  type        = list(string)
  default     = []
}

variable "vpc_security_group_ids" {
  description = "Security groups of the functions when vpc_subnet_ids is set."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.vpc_subnet_ids) == 0 || length(var.vpc_security_group_ids) > 0
    error_message = "vpc_security_group_ids must not be empty when vpc_subnet_ids is set."
  }
}

variable "code_signing_config_arn" {
  description = "Optional Lambda code signing configuration for the three functions."
  type        = string
  default     = null
}

# ----- storage ---------------------------------------------------------------------------------------
variable "bucket_name" {
  description = "Name of the bucket for graphs and rendered files (TOPOCAST_BUCKET). Null: AWS picks a unique name starting with <name_prefix>-<cluster>-."
  type        = string
  default     = null
}

variable "bucket_force_destroy" {
  description = "Let `terraform destroy` delete the bucket with its objects (test accounts only)."
  type        = bool
  default     = false
}

variable "prefix" {
  description = "Key prefix inside the bucket (TOPOCAST_PREFIX); objects live under <prefix>/<cluster>/{graphs,rendered,state,uploads}/."
  type        = string
  default     = "topocast"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.prefix))
    error_message = "prefix must be path segments of letters, digits, '.', '_' and '-' separated by '/', with no leading or trailing '/'."
  }
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object version is kept (the bucket is versioned)."
  type        = number
  default     = 30

  validation {
    condition     = var.noncurrent_version_days >= 1
    error_message = "noncurrent_version_days must be at least 1."
  }
}

variable "generation_retention_days" {
  description = "Days each generation's stored graph and rendered files are kept (<prefix>/<cluster>/graphs/<generation>.json and rendered/<generation>/; the latest.json pointers are never expired), by the bucket's own lifecycle rule. About 8 MB a generation at 10,000 nodes: the one storage cost that grows (docs/cost.md). Null: keep every generation. Keep it longer than the longest time the cluster may go without a change: when the latest generation itself expires, the next discovery finds the store damaged and heals it with a full discovery (docs/architecture.md)."
  type        = number
  default     = null

  validation {
    condition     = var.generation_retention_days == null || try(var.generation_retention_days >= 1 && floor(var.generation_retention_days) == var.generation_retention_days, false)
    error_message = "generation_retention_days must be a whole number of days, at least 1 (or null: keep every generation)."
  }
}

variable "kms_key_arn" {
  description = "Customer managed KMS key for the bucket, queues, table, logs and function environments. Null: AWS managed encryption. The key policy must allow events.amazonaws.com (SQS targets) and logs.<region>.amazonaws.com."
  type        = string
  default     = null

  validation {
    condition     = var.kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:", var.kms_key_arn))
    error_message = "kms_key_arn must be a KMS key ARN (arn:aws:kms:...)."
  }
}

variable "state_table_deletion_protection" {
  description = "Deletion protection of the DynamoDB debounce table (it holds only timers; losing it costs one extra render)."
  type        = bool
  default     = false
}

# ----- discovery -------------------------------------------------------------------------------------
variable "topology_source" {
  description = "Where discover reads the topology (TOPOCAST_PROVIDER): aws (EC2 DescribeInstanceTopology), ibnetdiscover (dumps uploaded by on-prem collectors to <prefix>/<cluster>/uploads/), netq (the NetQ API, on the reconcile schedule only; see docs/onprem.md) or k8s-labels (the EKS nodes' topology labels, on the reconcile schedule only, reached like the Kubernetes publisher: eks_cluster_name / k8s_options.connection; docs/kubernetes.md). The EC2 and Auto Scaling rules and the EC2 grants exist only with aws."
  type        = string
  default     = "aws"

  validation {
    condition     = contains(["aws", "ibnetdiscover", "netq", "k8s-labels"], var.topology_source)
    error_message = "topology_source must be aws, ibnetdiscover, netq or k8s-labels."
  }
}

variable "overlays" {
  description = "Merged sources read after topology_source (TOPOCAST_OVERLAYS; docs/providers.md): SOURCE:FIELD=VALUE[,FIELD=VALUE...], e.g. k8s-labels:domain=nvidia.com/gpu.clique for the NVLink cliques on top of EC2's capacity blocks. A k8s-labels overlay reaches the cluster like the Kubernetes publisher (eks_cluster_name / k8s_options.connection). Empty: none."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for o in var.overlays : can(regex("^k8s-labels:(domain|subdomain|fabric|preset)=[^;]+$", o))])
    error_message = "overlays entries must look like k8s-labels:FIELD=VALUE[,FIELD=VALUE...] (FIELD: domain, subdomain, fabric, preset) and contain no ';'."
  }
}

variable "node_labels" {
  description = "With topology_source = k8s-labels: which node labels make the topology (TOPOCAST_NODE_LABELS, NodeLabelsConfig: fabric_keys, accelerator_key, node_selector). Empty: the EKS, GKE and Topograph label schemes."
  type        = any
  default     = {}

  validation {
    condition     = length(var.node_labels) == 0 || var.topology_source == "k8s-labels"
    error_message = "node_labels is only used with topology_source = k8s-labels."
  }
}

# ----- on-prem fabrics (topology_source = ibnetdiscover or netq; docs/onprem.md) ---------------------------
variable "netq_url" {
  description = "NetQ API base URL, e.g. https://netq.example.com (TOPOCAST_NETQ_URL). Required with topology_source = netq; the functions must reach it (vpc_subnet_ids for a private NetQ)."
  type        = string
  default     = null

  validation {
    condition     = var.netq_url == null || can(regex("^https?://[^/\\s]+(/\\S*)?$", coalesce(var.netq_url, "https://x")))
    error_message = "netq_url must be an http(s) URL such as https://netq.example.com."
  }
  validation {
    condition     = (var.netq_url != null) == (var.topology_source == "netq")
    error_message = "netq_url is required with topology_source = netq and not used otherwise."
  }
}

variable "netq_credentials_arn" {
  description = "Where discover reads the NetQ credentials JSON (TOPOCAST_NETQ_CREDENTIALS): a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME-xxxxxx) or an SSM SecureString parameter ARN (arn:aws:ssm:REGION:ACCOUNT:parameter/NAME). The discover role may read exactly that secret or parameter. Required with topology_source = netq."
  type        = string
  default     = null

  validation {
    condition     = var.netq_credentials_arn == null || can(regex("^arn:aws[a-z-]*:(secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+|ssm:[a-z0-9-]+:[0-9]{12}:parameter/[A-Za-z0-9/_.-]+)$", coalesce(var.netq_credentials_arn, "x")))
    error_message = "netq_credentials_arn must be a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME) or an SSM parameter ARN (arn:aws:ssm:REGION:ACCOUNT:parameter/NAME), with the region and account filled in."
  }
  validation {
    condition     = (var.netq_credentials_arn != null) == (var.topology_source == "netq")
    error_message = "netq_credentials_arn is required with topology_source = netq and not used otherwise."
  }
}

variable "netq_credentials_kms_key_arn" {
  description = "Customer managed KMS key encrypting the NetQ credentials secret or parameter: discover gets kms:Decrypt on it, only through Secrets Manager / SSM. Null: the AWS managed key (no grant needed)."
  type        = string
  default     = null

  validation {
    condition     = var.netq_credentials_kms_key_arn == null || can(regex("^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/", coalesce(var.netq_credentials_kms_key_arn, "x")))
    error_message = "netq_credentials_kms_key_arn must be a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)."
  }
  validation {
    condition     = var.netq_credentials_kms_key_arn == null || var.netq_credentials_arn != null
    error_message = "netq_credentials_kms_key_arn is only used with netq_credentials_arn."
  }
}

variable "netq_premises" {
  description = "NetQ premises to read, by name or OPID (TOPOCAST_NETQ_PREMISES). Empty: those the NetQ login marks as viewed."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for p in var.netq_premises : p != "" && !strcontains(p, ";")])
    error_message = "netq_premises entries must be non-empty and contain no ';'."
  }
  validation {
    condition     = length(var.netq_premises) == 0 || var.topology_source == "netq"
    error_message = "netq_premises is only used with topology_source = netq."
  }
}

variable "domains_uri" {
  description = "Optional NVLink domains file for ibnetdiscover or netq (TOPOCAST_DOMAINS_URI): s3://<this module's bucket>/<prefix>/<cluster>/uploads/<file>, or ssm:///<parameter name> holding a topocast envelope (docs/onprem.md). discover may read exactly that object or parameter."
  type        = string
  default     = null

  validation {
    condition     = var.domains_uri == null || can(regex("^(ssm:///[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*|s3://[a-z0-9][a-z0-9.-]+[a-z0-9]/[^?#]+[^/])$", coalesce(var.domains_uri, "x")))
    error_message = "domains_uri must be s3://BUCKET/KEY or ssm:///PARAMETER/NAME (three slashes)."
  }
  validation {
    # discover's read grant covers <prefix>/<cluster>/uploads/* of the module's bucket; a file elsewhere would be a 403
    condition     = !startswith(coalesce(var.domains_uri, "ssm:"), "s3://") || startswith(replace(coalesce(var.domains_uri, "x"), "/^s3://[^/]+//", ""), "${var.prefix}/${var.cluster}/uploads/")
    error_message = "an s3:// domains_uri must be in the module's bucket under <prefix>/<cluster>/uploads/ (where discover may read), e.g. s3://BUCKET/topocast/CLUSTER/uploads/domains.csv."
  }
  validation {
    condition     = var.bucket_name == null || !startswith(coalesce(var.domains_uri, "ssm:"), "s3://") || startswith(coalesce(var.domains_uri, "x"), "s3://${coalesce(var.bucket_name, "-")}/")
    error_message = "an s3:// domains_uri must name the module's bucket (bucket_name)."
  }
  validation {
    condition     = var.domains_uri == null || var.topology_source != "aws"
    error_message = "domains_uri is only used with topology_source = ibnetdiscover or netq (EC2 reports NVLink domains itself)."
  }
}

variable "ib_host_regex" {
  description = "ibnetdiscover: Python regex matching a whole HCA description, group 'host' (or group 1) being the node name (TOPOCAST_IB_HOST_REGEX). Null: the code's default, rdma-ndd's \"<host> <device>\"."
  type        = string
  default     = null

  validation {
    condition     = var.ib_host_regex == null || can(regex("\\((\\?P<host>|[^?])", coalesce(var.ib_host_regex, "x")))
    error_message = "ib_host_regex needs a capture group for the host name, e.g. (?P<host>\\S+)\\s+\\S+."
  }
  validation {
    condition     = var.ib_host_regex == null || var.topology_source == "ibnetdiscover"
    error_message = "ib_host_regex is only used with topology_source = ibnetdiscover."
  }
}

variable "ib_port_selection" {
  description = "ibnetdiscover/netq: which ports are the compute fabric on a dual-fabric dump (TOPOCAST_IB_HCAS, _GUIDS, _SWITCHES). hcas: HCA device-name patterns (mlx5_[0-7]); guids: HCA node/port GUIDs (ibnetdiscover only); switches: switch-name patterns; a leading '!' excludes (!mlx5_8, !STOR-*). Empty: every port (docs/onprem.md)."
  type = object({
    hcas     = optional(list(string), [])
    guids    = optional(list(string), [])
    switches = optional(list(string), [])
  })
  default = {}

  validation {
    condition     = alltrue([for p in concat(var.ib_port_selection.hcas, var.ib_port_selection.guids, var.ib_port_selection.switches) : length(trimprefix(p, "!")) > 0 && !strcontains(p, ";") && !strcontains(p, ",")])
    error_message = "ib_port_selection patterns must be non-empty and contain no ';' or ','."
  }
  validation {
    condition     = alltrue([for g in var.ib_port_selection.guids : can(regex("^!?(0x)?[0-9a-fA-F]{1,16}$", g))])
    error_message = "ib_port_selection.guids entries must be GUIDs (up to 16 hex digits, 0x optional, '!' excludes)."
  }
  validation {
    condition     = contains(["ibnetdiscover", "netq"], var.topology_source) || length(concat(var.ib_port_selection.hcas, var.ib_port_selection.guids, var.ib_port_selection.switches)) == 0
    error_message = "ib_port_selection is only used with topology_source = ibnetdiscover or netq."
  }
  validation {
    condition     = var.topology_source != "netq" || length(var.ib_port_selection.guids) == 0
    error_message = "ib_port_selection.guids is ibnetdiscover only (NetQ selects by interface and switch name)."
  }
}

variable "ec2_filters" {
  description = "Cluster membership as EC2 DescribeInstances filters NAME=V1,V2 (TOPOCAST_FILTERS). Null: tag:topocast:cluster=<cluster>. EventBridge cannot filter EC2 state changes by tag, so the discover function applies these."
  type        = list(string)
  default     = null

  validation {
    condition     = var.ec2_filters == null || alltrue([for f in coalesce(var.ec2_filters, []) : can(regex("^[^=;]+=[^;]+$", f))])
    error_message = "ec2_filters entries must look like NAME=VALUE[,VALUE...] (e.g. tag:topocast:cluster=c1) and contain no ';'."
  }
}

variable "name_from" {
  description = "Node name source (TOPOCAST_NAME_FROM): private-dns, private-dns-fqdn, instance-id, tag:<key> or template:<text>. Null: the code's default, private-dns."
  type        = string
  default     = null

  validation {
    condition     = var.name_from == null || can(regex("^(private-dns|private-dns-fqdn|instance-id|tag:.+|template:.+)$", coalesce(var.name_from, "private-dns")))
    error_message = "name_from must be private-dns, private-dns-fqdn, instance-id, tag:<key> or template:<text>."
  }
}

variable "instance_types" {
  description = "Optional instance-type allow list (TOPOCAST_INSTANCE_TYPES); empty: all."
  type        = list(string)
  default     = []
}

variable "zones" {
  description = "Optional availability-zone allow list (TOPOCAST_ZONES); empty: all."
  type        = list(string)
  default     = []
}

variable "full_scan_threshold" {
  description = "Instance events in one batch above which discover rescans the cluster instead of updating (TOPOCAST_FULL_SCAN_THRESHOLD)."
  type        = number
  default     = 100

  validation {
    condition     = var.full_scan_threshold >= 1
    error_message = "full_scan_threshold must be at least 1."
  }
}

variable "autoscaling_group_names" {
  description = "Auto Scaling groups of the cluster: their launch/terminate events go to discover. Empty: no Auto Scaling rule."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.autoscaling_group_names) == 0 || var.topology_source == "aws"
    error_message = "autoscaling_group_names is only used with topology_source = aws (on-prem fabrics are not EC2 instances)."
  }
}

variable "reconcile_schedule" {
  description = "EventBridge schedule of the full reconcile (rate(...) or cron(...)). With topology_source = netq it is the only trigger: NetQ sends no events."
  type        = string
  default     = "rate(15 minutes)"

  validation {
    condition     = can(regex("^(rate|cron)\\(.+\\)$", var.reconcile_schedule))
    error_message = "reconcile_schedule must be rate(...) or cron(...)."
  }
}

variable "enable_upload_events" {
  description = "Send S3 object-created events for <prefix>/<cluster>/uploads/ (on-prem collector uploads) to discover. Always on with topology_source = ibnetdiscover."
  type        = bool
  default     = false
}

variable "events_batch_size" {
  description = "Most events discover receives per invocation."
  type        = number
  default     = 1000

  validation {
    condition     = var.events_batch_size >= 1 && var.events_batch_size <= 10000
    error_message = "events_batch_size must be between 1 and 10000."
  }
}

variable "events_batching_window_seconds" {
  description = "How long Lambda gathers events before invoking discover (the first debounce)."
  type        = number
  default     = 10

  validation {
    condition     = var.events_batching_window_seconds >= 0 && var.events_batching_window_seconds <= 300
    error_message = "events_batching_window_seconds must be between 0 and 300."
  }
  validation {
    condition     = var.events_batch_size <= 10 || var.events_batching_window_seconds >= 1
    error_message = "Lambda requires events_batching_window_seconds >= 1 when events_batch_size is above 10."
  }
}

variable "max_receive_count" {
  description = "Receives before a message moves to its queue's dead-letter queue."
  type        = number
  default     = 5

  validation {
    condition     = var.max_receive_count >= 1 && var.max_receive_count <= 1000
    error_message = "max_receive_count must be between 1 and 1000."
  }
}

variable "restrict_dlq_sources" {
  description = "Set a redrive allow policy on each dead-letter queue so only its own source queue may use it. (moto ignores this attribute, so the moto test turns it off.)"
  type        = bool
  default     = true
}

# ----- debounce ----------------------------------------------------------------------------------------
variable "debounce_quiet_seconds" {
  description = "Quiet window after the last change before a render (TOPOCAST_DEBOUNCE_QUIET_SECONDS); at most 900, the longest SQS delay."
  type        = number
  default     = 15

  validation {
    condition     = var.debounce_quiet_seconds > 0 && var.debounce_quiet_seconds <= 900
    error_message = "debounce_quiet_seconds must be greater than 0 and at most 900."
  }
}

variable "debounce_max_wait_seconds" {
  description = "Longest a change waits for a render while changes keep coming (TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS)."
  type        = number
  default     = 120

  validation {
    condition     = var.debounce_max_wait_seconds >= var.debounce_quiet_seconds
    error_message = "debounce_max_wait_seconds must be at least debounce_quiet_seconds."
  }
}

variable "debounce_leading_edge" {
  description = "Render the first change after a quiet window at once; the rest of a burst still debounces into one more render (TOPOCAST_DEBOUNCE_LEADING_EDGE). Off: every change waits out the quiet window (one render per burst)."
  type        = bool
  default     = false
}

# ----- render --------------------------------------------------------------------------------------------
variable "formats" {
  description = "Formats the render function writes (TOPOCAST_FORMATS)."
  type        = list(string)
  default     = ["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "graph", "html"]

  validation {
    condition     = length(var.formats) > 0 && alltrue([for f in var.formats : contains(["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "kueue", "kai", "volcano", "slinky", "graph", "html"], f)])
    error_message = "formats must be a non-empty list of: slurm-tree, slurm-block, slurm-yaml, k8s-labels, kueue, kai, volcano, slinky, graph, html."
  }
}

variable "render_options" {
  description = "RenderOptions (shared/topocast/renderers/base.py) as an object, passed as JSON in TOPOCAST_RENDER_OPTIONS. Empty: the code's defaults."
  type        = any
  default     = {}
}

variable "slurm_version" {
  description = "The Slurm release on the head node, e.g. \"26.05\" (TOPOCAST_SLURM_VERSION): a block smaller than the base block size is kept from 25.05 on and left out before (the render report names it). null: files every release accepts (such blocks left out)."
  type        = string
  default     = null
  validation {
    condition     = var.slurm_version == null || can(regex("^[0-9]{2}\\.[0-9]{2}(\\.[0-9]{1,3})?$", var.slurm_version))
    error_message = "slurm_version is a Slurm release such as 26.05 or 24.11.5."
  }
}

# ----- publish --------------------------------------------------------------------------------------------
variable "publishers" {
  description = "Publish targets (TOPOCAST_PUBLISHERS): ssm (Parameter Store for the Slurm pull agent), kubernetes and/or slurmrestd (live node moves over Slurm's REST API from the publish function: slurmrest_url, slurmrest_token_arn; docs/slurm-rest.md)."
  type        = list(string)
  default     = ["ssm"]

  validation {
    condition     = alltrue([for p in var.publishers : contains(["ssm", "kubernetes", "slurmrestd"], p)])
    error_message = "publishers may contain only ssm, kubernetes and slurmrestd."
  }
}

variable "slurmrest_url" {
  description = "slurmrestd the publish function calls with publishers = slurmrestd, e.g. http://10.0.0.5:6820 (TOPOCAST_SLURMREST_URL). The function must reach it: put it in the cluster's VPC with vpc_subnet_ids / vpc_security_group_ids (the security group of slurmrestd must admit them)."
  type        = string
  default     = null

  validation {
    condition     = var.slurmrest_url == null || can(regex("^https?://[^/\\s]+/?$", coalesce(var.slurmrest_url, "x")))
    error_message = "slurmrest_url must be http(s)://host:port."
  }
  validation {
    condition     = (var.slurmrest_url != null) == contains(var.publishers, "slurmrestd")
    error_message = "slurmrest_url is required with publishers containing slurmrestd and not used otherwise."
  }
}

variable "slurmrest_token_arn" {
  description = "Secrets Manager secret ARN holding the Slurm JWT the slurmrestd publisher sends (what `scontrol token username=slurm` prints; TOPOCAST_SLURMREST_TOKEN); the publish role may read exactly that secret. Read at every publish, so a rotated token is picked up."
  type        = string
  default     = null

  validation {
    condition     = var.slurmrest_token_arn == null || can(regex("^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$", coalesce(var.slurmrest_token_arn, "x")))
    error_message = "slurmrest_token_arn must be a Secrets Manager secret ARN (arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME), with the region and account filled in."
  }
  validation {
    condition     = (var.slurmrest_token_arn != null) == contains(var.publishers, "slurmrestd")
    error_message = "slurmrest_token_arn is required with publishers containing slurmrestd and not used otherwise."
  }
}

variable "slurmrest_max_share" {
  description = "Most nodes (share of the cluster) one publish moves live over slurmrestd (TOPOCAST_SLURMREST_MAX_SHARE); larger changes are left to the head-node agent's reconfigure."
  type        = number
  default     = 0.1

  validation {
    condition     = var.slurmrest_max_share >= 0 && var.slurmrest_max_share <= 1
    error_message = "slurmrest_max_share must be between 0 and 1."
  }
}

variable "ssm_prefix" {
  description = "SSM path of the Slurm files (TOPOCAST_SSM_PREFIX). Null: /topocast/<cluster>/slurm."
  type        = string
  default     = null

  validation {
    condition     = var.ssm_prefix == null || can(regex("^(/[A-Za-z0-9_.-]+)+$", coalesce(var.ssm_prefix, "/x")))
    error_message = "ssm_prefix must be an SSM path like /topocast/c1/slurm (leading '/', no trailing '/')."
  }
  # publish gets ssm:PutParameter on <ssm_prefix>/*: a path without the cluster's own segment (/topocast)
  # would let it overwrite other clusters' files
  validation {
    condition     = var.ssm_prefix == null || contains(split("/", coalesce(var.ssm_prefix, "/x")), var.cluster)
    error_message = "ssm_prefix must contain the cluster name as a path segment (e.g. /topocast/<cluster>/slurm): publish may write everything under it, so a shared path would cover other clusters' parameters."
  }
  # ... and must not cover the guard override, which only an operator may write
  validation {
    condition = var.ssm_prefix == null || !startswith(
      "${coalesce(var.guard_override_parameter, "/topocast/${var.cluster}/guard/allow-generation")}/",
      "${coalesce(var.ssm_prefix, "/x")}/"
    )
    error_message = "ssm_prefix must not contain the guard override parameter (guard_override_parameter): publish would be able to write its own override."
  }
}

variable "ssm_advanced_tier" {
  description = "Allow Advanced-tier (8 KB, billed) parameters before falling back to an S3 pointer (TOPOCAST_SSM_ADVANCED_TIER)."
  type        = bool
  default     = false
}

variable "guard_max_loss" {
  description = "Fraction of the published nodes one publish may drop before it is held for confirmation (TOPOCAST_GUARD_MAX_LOSS)."
  type        = number
  default     = 0.1

  validation {
    condition     = var.guard_max_loss >= 0 && var.guard_max_loss <= 1
    error_message = "guard_max_loss must be between 0 and 1."
  }
}

variable "guard_override_parameter" {
  description = "SSM parameter an operator sets to a generation number to let a held publish through (TOPOCAST_GUARD_OVERRIDE_PARAMETER). Null: /topocast/<cluster>/guard/allow-generation."
  type        = string
  default     = null

  validation {
    condition     = var.guard_override_parameter == null || can(regex("^(/[A-Za-z0-9_.-]+)+$", coalesce(var.guard_override_parameter, "/x")))
    error_message = "guard_override_parameter must be an SSM parameter path starting with '/'."
  }
}

variable "k8s_options" {
  description = "Kubernetes publisher options (KubernetesPublisherConfig in shared/topocast/publish/kubernetes.py) as an object, passed as JSON in TOPOCAST_K8S_OPTIONS. With eks_cluster_name set, connection.eks_cluster and connection.region are filled in."
  type        = any
  default     = {}
}

variable "eks_cluster_name" {
  description = "EKS cluster the kubernetes publisher writes to: creates an access entry for the publish role and grants eks:DescribeCluster on it. Null: none."
  type        = string
  default     = null
}

variable "eks_kubernetes_groups" {
  description = "Kubernetes groups of the publish role's access entry; infra/k8s/rbac.yaml binds topocast:publishers to exactly what the publisher needs."
  type        = list(string)
  default     = ["topocast:publishers"]
}

variable "eks_access_policy_arn" {
  description = "Optional EKS access policy to associate as well (cluster scope), e.g. arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy. Null: rely on eks_kubernetes_groups and RBAC (least privilege)."
  type        = string
  default     = null
}

variable "create_pull_agent_policy" {
  description = "Create an IAM policy for the Slurm head node's pull agent (read the SSM path and S3 pointer copies)."
  type        = bool
  default     = false
}

variable "pull_watch_head_nodes" {
  description = "Slurm head nodes that run `topocast pull --watch`: each gets an SQS queue fed by an EventBridge rule on the published parameters' change events, and an IAM policy to receive from it (outputs pull_watch_queue_urls, pull_watch_policy_arns)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for n in var.pull_watch_head_nodes : can(regex("^[A-Za-z0-9_-]{1,40}$", n))])
    error_message = "pull_watch_head_nodes: names of at most 40 letters, digits, '-' and '_' (they name queues)."
  }
}

# ----- alarms ------------------------------------------------------------------------------------------------
variable "create_alarms" {
  description = "Create CloudWatch alarms on dead-letter queues, function errors and held publishes."
  type        = bool
  default     = true
}

variable "alarm_topic_arn" {
  description = "SNS topic notified when an alarm fires and clears. Null: alarms without actions."
  type        = string
  default     = null
}

variable "follow_rechecks" {
  description = "Re-reads of a VM through host maintenance or a restart until it runs again or is out, at most; 0: one read decides (TOPOCAST_FOLLOW_RECHECKS)."
  type        = number
  default     = 6

  validation {
    condition     = var.follow_rechecks >= 0 && var.follow_rechecks <= 100
    error_message = "follow_rechecks must be within 0..100."
  }
}

variable "follow_interval_seconds" {
  description = "Seconds between those re-reads (TOPOCAST_FOLLOW_INTERVAL_SECONDS; SQS delays at most 900)."
  type        = number
  default     = 30

  validation {
    condition     = var.follow_interval_seconds >= 1 && var.follow_interval_seconds <= 900
    error_message = "follow_interval_seconds must be within 1..900."
  }
}
