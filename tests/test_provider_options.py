"""The generic provider-options path: ``--option KEY=VALUE``, ``TOPOCAST_PROVIDER_OPTIONS``, ``--list-options``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from topocast.cli.package import load_project, requirements
from topocast.config import settings_from_env
from topocast.errors import ProviderError, TopocastError
from topocast.providers import ProviderInputs, build_provider
from topocast.providers.options import parse_option_pairs

REPO = Path(__file__).resolve().parent.parent


def test_option_values_parse_as_json_when_they_can() -> None:
    pairs = ["compartment=ocid1.compartment.oc1..x", "page_size=50", "racks=false", 'tags={"a": "b"}', "name=a=b"]
    assert parse_option_pairs(pairs) == {
        "compartment": "ocid1.compartment.oc1..x", "page_size": 50, "racks": False, "tags": {"a": "b"}, "name": "a=b"
    }  # fmt: skip
    with pytest.raises(ProviderError, match=r"^--option 'page_size' is given twice$"):
        parse_option_pairs(["page_size=1", "page_size=2"])
    with pytest.raises(ProviderError, match=r"^--option 'racks': expected KEY=VALUE$"):
        parse_option_pairs(["racks"])


def test_the_functions_settings_carry_options_of_providers_the_table_does_not_list() -> None:
    opts = {"project": "project-e00a", "page_size": 10}
    env = {"TOPOCAST_CLUSTER": "c1", "TOPOCAST_PROVIDER": "nebius", "TOPOCAST_PROVIDER_OPTIONS": json.dumps(opts)}
    settings = settings_from_env(env)
    assert settings.provider_options() == opts
    provider = build_provider("nebius", ProviderInputs("c1", settings.provider_options()))
    # a runtime without a Nebius client (the AWS / GCP functions) says so in one line
    with pytest.raises(ProviderError, match=r"^this runtime supplies no 'nebius' client$"):
        provider.discover_full(None)
    bad = {**env, "TOPOCAST_PROVIDER_OPTIONS": "{not json"}
    with pytest.raises(TopocastError, match=r"^TOPOCAST_PROVIDER_OPTIONS is not valid JSON"):
        settings_from_env(bad)
    wrong = {**env, "TOPOCAST_PROVIDER_OPTIONS": json.dumps({"projekt": "x"})}
    with pytest.raises(ProviderError, match=r"^provider 'nebius': option 'project' is required \(and 1 more\)$"):
        build_provider("nebius", ProviderInputs("c1", settings_from_env(wrong).provider_options()))
    # the table still decides for the providers it lists
    aws = settings_from_env({"TOPOCAST_CLUSTER": "c1", "TOPOCAST_PROVIDER_OPTIONS": json.dumps(opts)})
    assert "project" not in aws.provider_options() and "filters" in aws.provider_options()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "topocast.cli", *args], capture_output=True, text=True)


def test_list_options_prints_each_providers_options_from_its_model() -> None:
    run = cli("discover", "--list-options")
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    assert "oci:" in out and "nebius:" in out and "aws: takes the flags of topocast discover --help" in out
    assert '  source (api|imds, default "api"): api: ListComputeHosts; imds: rdmaTopologyData.' in out
    assert any(line.startswith("  project (str, required): Project ID") for line in out)


def test_a_bad_option_from_the_cli_is_one_line() -> None:
    run = cli("discover", "--provider", "oci", "--option", "compartment=x", "--option", "page_size=many")
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.splitlines() == [
        "topocast: error: provider 'oci': option 'page_size' Input should be a valid integer, unable to parse "
        'string as an integer (got "many")'
    ]


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_no_function_archive_carries_the_oci_or_nebius_sdk(cloud: str) -> None:
    project = load_project(REPO)
    for stage in ("discover", "render", "publish"):
        reqs = requirements(project, cloud, stage)
        assert reqs and not [r for r in reqs if re.match(r"(?i)(oci|nebius|azure)\b", r)], reqs
