# Bad inputs are rejected at plan time with a message naming the variable.

mock_provider "aws" {
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}" }
  }
  mock_resource "aws_iam_role" {
    defaults = { arn = "arn:aws:iam::111122223333:role/mock" }
  }
  mock_resource "aws_sqs_queue" {
    defaults = { arn = "arn:aws:sqs:eu-west-1:111122223333:mock" }
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

run "cluster_name_must_be_dns_safe" {
  command = plan
  variables {
    cluster = "GPU_A"
  }
  expect_failures = [var.cluster]
}

run "packages_must_exist" {
  command = plan
  variables {
    function_packages = { discover = "dist/aws/nope.zip", render = "tests/fixtures/handler.zip", publish = "tests/fixtures/handler.zip" }
  }
  expect_failures = [var.function_packages]
}

run "big_batches_need_a_batching_window" {
  command = plan
  variables {
    events_batch_size              = 1000
    events_batching_window_seconds = 0
  }
  expect_failures = [var.events_batching_window_seconds]
}

run "max_wait_must_cover_the_quiet_window" {
  command = plan
  variables {
    debounce_quiet_seconds    = 60
    debounce_max_wait_seconds = 30
  }
  expect_failures = [var.debounce_max_wait_seconds]
}

run "unknown_publisher" {
  command = plan
  variables {
    publishers = ["ssm", "slack"]
  }
  expect_failures = [var.publishers]
}

run "unknown_format" {
  command = plan
  variables {
    formats = ["slurm-tree", "topology.conf"]
  }
  expect_failures = [var.formats]
}

run "filters_need_name_and_value" {
  command = plan
  variables {
    ec2_filters = ["tag:topocast:cluster"]
  }
  expect_failures = [var.ec2_filters]
}

run "guard_fraction_range" {
  command = plan
  variables {
    guard_max_loss = 1.5
  }
  expect_failures = [var.guard_max_loss]
}

run "netq_needs_its_credentials" {
  command = plan
  variables {
    topology_source = "netq"
    netq_url        = "https://netq.example.com"
  }
  expect_failures = [var.netq_credentials_arn]
}

run "netq_credentials_are_a_secret_or_a_parameter" {
  command = plan
  variables {
    topology_source      = "netq"
    netq_url             = "https://netq.example.com"
    netq_credentials_arn = "arn:aws:s3:::creds/netq.json"
  }
  expect_failures = [var.netq_credentials_arn]
}

run "netq_settings_need_topology_source_netq" {
  command = plan
  variables {
    netq_url      = "https://netq.example.com"
    netq_premises = ["dc-a"]
  }
  expect_failures = [var.netq_url, var.netq_premises]
}

run "s3_domains_file_must_be_under_uploads" {
  command = plan
  variables {
    topology_source = "ibnetdiscover"
    domains_uri     = "s3://b/topocast/c1/graphs/domains.csv"
  }
  expect_failures = [var.domains_uri]
}

run "domains_are_for_on_prem_fabrics" {
  command = plan
  variables {
    domains_uri = "ssm:///topocast/c1/domains"
  }
  expect_failures = [var.domains_uri]
}

run "no_autoscaling_rule_for_an_on_prem_fabric" {
  command = plan
  variables {
    topology_source         = "netq"
    netq_url                = "https://netq.example.com"
    netq_credentials_arn    = "arn:aws:ssm:eu-west-1:111122223333:parameter/netq"
    autoscaling_group_names = ["c1-p5"]
  }
  expect_failures = [var.autoscaling_group_names]
}

run "ssm_prefix_must_not_cover_other_clusters" {
  command = plan
  variables {
    ssm_prefix = "/topocast"
  }
  expect_failures = [var.ssm_prefix]
}

run "ssm_prefix_must_not_cover_the_guard_override" {
  command = plan
  variables {
    ssm_prefix = "/topocast/c1"
  }
  expect_failures = [var.ssm_prefix]
}

run "ssm_prefix_must_not_cover_a_custom_guard_override" {
  command = plan
  variables {
    ssm_prefix               = "/hpc/c1/slurm"
    guard_override_parameter = "/hpc/c1/slurm/allow"
  }
  expect_failures = [var.ssm_prefix]
}

run "ssm_prefix_of_its_own_cluster_is_fine" {
  command = plan
  variables {
    ssm_prefix = "/hpc/c1/slurm"
  }
}

run "port_selection_needs_an_on_prem_fabric" {
  command = plan
  variables {
    ib_port_selection = { hcas = ["mlx5_[0-7]"] }
  }
  expect_failures = [var.ib_port_selection]
}

run "port_selection_guids_are_guids" {
  command = plan
  variables {
    topology_source   = "ibnetdiscover"
    ib_port_selection = { guids = ["mlx5_0"] }
  }
  expect_failures = [var.ib_port_selection]
}

run "overlays_follow_the_grammar" {
  command = plan
  variables {
    overlays = ["dra:domain=x"]
  }
  expect_failures = [var.overlays]
}
