"""The generic provider-options path: ``--option KEY=VALUE``, ``TOPOCAST_PROVIDER_OPTIONS``, ``--list-options``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import Field, create_model

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
    # a provider's own variables and TOPOCAST_PROVIDER_OPTIONS over them
    aws = {"TOPOCAST_CLUSTER": "c1", "TOPOCAST_FILTERS": "tag:a=b", "TOPOCAST_NAME_FROM": "instance-id"}
    both = settings_from_env({**aws, "TOPOCAST_PROVIDER_OPTIONS": json.dumps({"name_from": "tag:Name"})})
    assert both.provider_options() == {"filters": ["tag:a=b"], "name_from": "tag:Name"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "topocast.cli", *args], capture_output=True, text=True)


def test_list_options_prints_each_providers_options_from_its_model() -> None:
    run = cli("discover", "--list-options")
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    assert "oci:" in out and "nebius:" in out and "aws:" in out
    # an option's own flag and variable, from the same model
    assert (
        "  zones (list, default []): List only these zones (empty: aggregatedList). [--zone, TOPOCAST_GCP_ZONES]" in out
    )
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


def test_an_option_added_to_one_provider_module_reaches_list_options_the_env_table_and_the_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one place to add an option: its provider's Options model (here a new gcp option)."""
    from topocast.cli.discover import discover_args, list_options, provider_inputs
    from topocast.cli.parser import COMMANDS
    from topocast.config import env_table
    from topocast.providers.gcp import provider as gcp
    from topocast.providers.options import OptionSpec

    spec = OptionSpec(env="TOPOCAST_GCP_MAX_VMS", flags=("--max-vms",), help="stop after this many VMs")
    added = create_model(
        "Options", __base__=gcp.Options, max_vms=(Annotated[int | None, spec], Field(None, description="At most N."))
    )
    monkeypatch.setattr(gcp, "Options", added)

    assert "  max_vms (int | None, default null): At most N. [--max-vms, TOPOCAST_GCP_MAX_VMS]" in list_options()
    assert env_table()["TOPOCAST_GCP_MAX_VMS"] == ("provider_env", "gcp: At most N.")
    env = {
        "TOPOCAST_CLUSTER": "c1",
        "TOPOCAST_PROVIDER": "gcp",
        "TOPOCAST_GCP_PROJECT": "p1",
        "TOPOCAST_GCP_MAX_VMS": "7",
    }
    assert settings_from_env(env).provider_options() == {"project": "p1", "max_vms": "7"}
    parser = COMMANDS[("discover",)].parser()
    assert "gcp: stop after this many VMs." in parser.format_help()
    args = discover_args(vars(parser.parse_args(["--provider", "gcp", "--project", "p1", "--max-vms", "7"])))
    inputs = provider_inputs(args)
    assert inputs.options["max_vms"] == "7" and inputs.options["project"] == "p1" and inputs.cluster == "p1"
    # and the provider's own model validates it (the one the provider is built with)
    assert added.model_validate({"project": "p1", "max_vms": "7"}).max_vms == 7  # type: ignore[attr-defined]


def test_the_docs_option_tables_are_the_models() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("provider_options_doc", REPO / "tools" / "provider_options_doc.py")
    assert spec is not None and spec.loader is not None
    doc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(doc)
    text = doc.DOC.read_text()
    assert doc.rendered(text) == text, (
        "docs/providers.md option tables are stale: run python tools/provider_options_doc.py"
    )
    # each table row is a line of --list-options (same key, type, default, description and names)
    from topocast.providers import provider_models
    from topocast.providers.options import describe_options, option_rows

    for name, model in provider_models().items():
        described = describe_options(name, model)
        for row in option_rows(model):
            assert f"| `{row.key}` | {row.kind.replace('|', chr(92) + '|')} |" in text
            assert any(line.startswith(f"  {row.key} ({row.kind}, {row.default})") for line in described)


@pytest.mark.parametrize(
    ("provider", "options", "error"),
    [
        (
            "oci",
            {"compartment": "ocid1.compartment.oc1..x", "attempts": True},
            "option 'attempts' must be int, not true",
        ),
        ("oci", {"compartment": "ocid1.compartment.oc1..x", "attempts": 2.0}, "option 'attempts' must be int, not 2.0"),
        ("nebius", {"project": "project-e00a", "page_size": False}, "option 'page_size' must be int, not false"),
    ],
)
def test_a_typed_option_value_of_the_wrong_json_type_is_refused_not_coerced(
    provider: str, options: dict[str, object], error: str
) -> None:
    env = {"TOPOCAST_CLUSTER": "c1", "TOPOCAST_PROVIDER": provider, "TOPOCAST_PROVIDER_OPTIONS": json.dumps(options)}
    with pytest.raises(ProviderError, match=f"^provider {provider!r}: {re.escape(error)}$"):
        build_provider(provider, ProviderInputs("c1", settings_from_env(env).provider_options()))


def test_a_variable_s_text_is_still_read_as_its_number() -> None:
    opts = {"project": "project-e00a", "page_size": "10"}  # a TOPOCAST_* variable is text by nature
    provider = build_provider("nebius", ProviderInputs("c1", opts))
    assert provider.options.page_size == 10  # type: ignore[attr-defined]
