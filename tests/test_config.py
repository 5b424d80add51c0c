"""Function configuration from TOPOCAST_* environment variables."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from topocast.config import Settings, env_table, settings_from_env
from topocast.errors import TopocastError
from topocast.ports.debounce import DebouncePolicy


def test_every_settings_field_can_be_set_from_the_environment() -> None:
    fields = {field for field, _ in env_table().values()}
    assert set(Settings.model_fields) == fields, set(Settings.model_fields) ^ fields


def test_lists_json_and_flags_are_parsed() -> None:
    s = settings_from_env(
        {
            "TOPOCAST_CLUSTER": "c1",
            "TOPOCAST_FILTERS": "tag:topocast:cluster=c1;instance-type=p5.48xlarge,p5e.48xlarge",
            "TOPOCAST_FORMATS": "slurm-tree,slurm-block",
            "TOPOCAST_RENDER_OPTIONS": '{"block_sizes": [18, 72]}',
            "TOPOCAST_SSM_ADVANCED_TIER": "true",
            "TOPOCAST_NETQ_PREMISES": "dc1;dc2",
            "TOPOCAST_RESERVED_NODES": '{"cr-0123456789abcdef0": "gpu-[1-2]"}',
        }
    )
    # the aws provider's own variables (the default provider): filters split on ';' only
    assert s.provider_options() == {
        "filters": ["tag:topocast:cluster=c1", "instance-type=p5.48xlarge,p5e.48xlarge"],
        "reserved_nodes": {"cr-0123456789abcdef0": "gpu-[1-2]"},
    }
    assert s.formats == ["slurm-tree", "slurm-block"]
    assert s.render_options.block_sizes == [18, 72]
    assert s.ssm_advanced_tier is True
    assert s.model_copy(update={"provider": "netq"}).provider_options() == {"premises": ["dc1", "dc2"]}
    assert s.ssm_path == "/topocast/c1/slurm"


def test_a_providers_variables_are_read_by_its_model_only_when_it_is_built() -> None:
    env = {"TOPOCAST_CLUSTER": "c", "TOPOCAST_PROVIDER": "gcp", "TOPOCAST_GCP_PROJECT": "p1",
           "TOPOCAST_GCP_LABEL": "a=b,c;d=e", "TOPOCAST_NAME_FROM": "hostname", "TOPOCAST_FILTERS": "x=y"}  # fmt: skip
    s = settings_from_env(env)
    # TOPOCAST_GCP_PROJECT is a setting of the GCP shell too (its bucket's project): the option reads it
    assert s.gcp_project == "p1"
    assert s.provider_options() == {"project": "p1", "labels": ["a=b,c", "d=e"], "name_from": "hostname"}
    bad = settings_from_env({**env, "TOPOCAST_PROVIDER": "k8s-labels", "TOPOCAST_NODE_LABELS": "{nope"})
    with pytest.raises(TopocastError, match=r"^TOPOCAST_NODE_LABELS is not valid JSON"):
        bad.provider_options()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "TOPOCAST_CLUSTER"),
        ({"TOPOCAST_CLUSTER": "c", "TOPOCAST_GUARD_MAX_LOSS": "2"}, "TOPOCAST_GUARD_MAX_LOSS"),
        ({"TOPOCAST_CLUSTER": "c", "TOPOCAST_RENDER_OPTIONS": "{nope"}, "TOPOCAST_RENDER_OPTIONS is not valid JSON"),
        ({"TOPOCAST_CLUSTER": "c", "TOPOCAST_DEBOUNCE_QUIET_SECONDS": "soon"}, "TOPOCAST_DEBOUNCE_QUIET_SECONDS"),
    ],
)
def test_bad_configuration_names_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(TopocastError, match=message):
        settings_from_env(env)


@pytest.mark.parametrize(
    "env",
    [
        {"TOPOCAST_DEBOUNCE_QUIET_SECONDS": "300"},  # over the default max wait of 120 s
        {"TOPOCAST_DEBOUNCE_QUIET_SECONDS": "30", "TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS": "10"},
    ],
)
def test_a_quiet_window_longer_than_the_max_wait_is_refused_naming_both_variables(env: dict[str, str]) -> None:
    with pytest.raises(TopocastError) as err:
        settings_from_env({"TOPOCAST_CLUSTER": "c", **env})
    message = str(err.value)
    assert "\n" not in message
    assert "TOPOCAST_DEBOUNCE_QUIET_SECONDS" in message and "TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS" in message
    equal = settings_from_env({"TOPOCAST_CLUSTER": "c", "TOPOCAST_DEBOUNCE_QUIET_SECONDS": "120"})
    assert (equal.debounce_quiet, equal.debounce_max_wait) == (120.0, 120.0)  # quiet == max wait is fine


@pytest.mark.parametrize(
    ("formats", "named"),
    [
        ("slurm-tree,kueu", "unknown format(s) 'kueu'"),
        ("slurm-tree;all", "unknown format(s) 'all'"),
        (" , ", "no format"),
    ],
)
def test_an_unknown_format_is_refused_when_settings_load_naming_it_and_the_known_ones(formats: str, named: str) -> None:
    with pytest.raises(TopocastError) as err:
        settings_from_env({"TOPOCAST_CLUSTER": "c", "TOPOCAST_FORMATS": formats})
    message = str(err.value)
    assert "\n" not in message and "TOPOCAST_FORMATS" in message and named in message
    assert "known: slurm-tree, slurm-block, slurm-yaml, k8s-labels, kueue, kai, volcano, slinky, graph, html" in message
    ok = settings_from_env({"TOPOCAST_CLUSTER": "c", "TOPOCAST_FORMATS": "kueue;slurm-tree"})
    assert ok.formats == ["kueue", "slurm-tree"]


def test_missing_required_setting_names_the_variable() -> None:
    s = settings_from_env({"TOPOCAST_CLUSTER": "c"})
    with pytest.raises(TopocastError, match="TOPOCAST_STATE_TABLE, TOPOCAST_TIMER_QUEUE_URL"):
        s.require("state_table", "timer_queue_url")


def test_settings_are_split_by_concern_and_every_variable_has_one_home() -> None:
    from topocast.config import SECTIONS, Settings

    homes: dict[str, list[str]] = {}
    for section in SECTIONS:
        for name in section.model_fields:
            homes.setdefault(name, []).append(section.__name__)
    assert {n: h for n, h in homes.items() if len(h) > 1} == {}  # no field in two sections
    assert set(homes) == set(Settings.model_fields)  # Settings is exactly its sections
    fields = {field for field, _ in env_table().values()}
    assert fields == set(Settings.model_fields)  # every field has its variable and every variable a field
    assert homes["state_table"] == ["AwsWiring"] and homes["task_queue"] == ["GcpWiring"]
    assert homes["guard_max_loss"] == ["PublishSettings"] and homes["formats"] == ["RenderSettings"]


def test_the_debounce_knobs_are_one_policy_built_from_the_settings() -> None:
    env = {"TOPOCAST_CLUSTER": "c1"}
    # unset: the documented defaults (15 s quiet, 120 s max wait, no leading edge; lease 180 s, grace 300 s)
    assert DebouncePolicy.from_settings(settings_from_env(env)) == DebouncePolicy(
        quiet=15.0, max_wait=120.0, leading_edge=False, lease=180.0, lost_timer_grace=300.0, render_attempts=3
    )
    tuned = {
        **env,
        "TOPOCAST_DEBOUNCE_QUIET_SECONDS": "5",
        "TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS": "60",
        "TOPOCAST_DEBOUNCE_LEADING_EDGE": "true",
    }
    policy = DebouncePolicy.from_settings(settings_from_env(tuned))
    assert (policy.quiet, policy.max_wait, policy.leading_edge) == (5.0, 60.0, True)
    with pytest.raises(FrozenInstanceError):
        policy.quiet = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="debounce needs 0 <= quiet <= max_wait, got quiet=30 max_wait=20"):
        DebouncePolicy(quiet=30, max_wait=20)
