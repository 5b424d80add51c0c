"""``topocast health apply --target kubernetes`` against the fake API server (real HTTP, real client).

A node in the blast radius gets the ``topocast.io/fabric-degraded=<object>:NoSchedule`` taint and the
``topocast.io/fabric-health`` label; every other taint and label stays as it was; undoing removes only
topocast's own. The fake refuses what the real API server refuses for taints (``validateNodeTaints``).
The Kueue check is Kueue's own rule for ``TASReplaceNodeOnNodeTaints`` (a node whose taints a workload does
not tolerate, with effect NoSchedule or NoExecute, is a failed node), written here from its description.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_runner import invoke
from k8s_fake_apiserver import NODES, FakeKubeApiServer

from topocast.k8s.taints import TAINT_KEY

HOSTS = [f"gpu-{i}" for i in range(1, 9)]
THEIRS = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="t0k") as server:
        for name in HOSTS:
            server.add_node(name, {"team": "ml"})
        node = server.get(NODES, "gpu-2")
        assert node is not None
        node["spec"]["taints"] = [THEIRS]
        node.pop("status", None)
        server.put(NODES, node, manager="ops")
        yield server


def graph(tmp_path: Path, health: list[dict]) -> Path:
    # leaf-1 = gpu-[1-4], leaf-2 = gpu-[5-8]
    nodes = [{"name": n, "fabric": [f"leaf-{1 if i < 4 else 2}", "spine"]} for i, n in enumerate(HOSTS)]
    path = tmp_path / "g.json"
    path.write_text(
        json.dumps({"schema_version": 1, "cluster": "c1", "provider": "test", "nodes": nodes, "health": health})
    )
    return path


LEAF1 = [{"kind": "switch", "id": "leaf-1", "state": "impaired", "source": "ibnetdiscover", "reason": "gone",
          "observed_at": "2026-12-04T15:00:00Z"}]  # fmt: skip


def apply(fake: FakeKubeApiServer, tmp_path: Path, health: list[dict], *more: str):  # type: ignore[no-untyped-def]
    env = {"TOPOCAST_K8S_ENDPOINT": fake.url, "TOPOCAST_K8S_TOKEN": "t0k"}
    args = ["health", "apply", graph(tmp_path, health), "--target", "kubernetes", "--state-file",
            tmp_path / "state.json", "--max-share", "0.5", *more]  # fmt: skip
    return invoke(args, env)


def taints(fake: FakeKubeApiServer, name: str) -> list[dict]:
    node = fake.get(NODES, name)
    assert node is not None
    return list(node["spec"].get("taints") or [])


def labels(fake: FakeKubeApiServer, name: str) -> dict[str, str]:
    node = fake.get(NODES, name)
    assert node is not None
    return dict(node["metadata"].get("labels") or {})


def kueue_failed_node(node_taints: list[dict], tolerations: list[dict]) -> bool:
    """Kueue TASReplaceNodeOnNodeTaints: a NoSchedule / NoExecute taint the workload does not tolerate."""

    def tolerated(t: dict) -> bool:
        return any(
            tol.get("key") in (None, t["key"])
            and (tol.get("operator") == "Exists" or tol.get("value") == t.get("value"))
            and tol.get("effect") in (None, t["effect"])
            for tol in tolerations
        )

    return any(t["effect"] in ("NoSchedule", "NoExecute") and not tolerated(t) for t in node_taints)


def test_the_blast_radius_is_tainted_and_labelled_and_other_taints_stay(
    fake: FakeKubeApiServer, tmp_path: Path
) -> None:
    result = apply(fake, tmp_path, LEAF1)
    assert result.exit_code == 0, result.output
    ours = {"key": TAINT_KEY, "value": "switch.leaf-1", "effect": "NoSchedule"}
    assert taints(fake, "gpu-1") == [ours]
    assert taints(fake, "gpu-2") == [THEIRS, ours]
    assert taints(fake, "gpu-5") == []
    assert labels(fake, "gpu-3") == {"team": "ml", "topocast.io/fabric-health": "impaired"}
    assert labels(fake, "gpu-6") == {"team": "ml"}
    # Kueue's node-replacement input: the taint is untolerated NoSchedule for a workload that only tolerates
    # the GPU taint, so gpu-[1-4] count as failed and gpu-5 does not
    gpu_only = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert [h for h in HOSTS if kueue_failed_node(taints(fake, h), gpu_only)] == ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]


def test_healing_removes_only_topocasts_taint_and_label(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    assert apply(fake, tmp_path, LEAF1).exit_code == 0
    result = apply(fake, tmp_path, [], "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["resumed"] == ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    assert taints(fake, "gpu-2") == [THEIRS]
    assert taints(fake, "gpu-1") == []
    assert all(labels(fake, h) == {"team": "ml"} for h in HOSTS)


def test_a_concurrent_writer_is_not_overwritten(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    # someone adds a taint to gpu-3 between topocast's LIST and its PATCH: the PATCH (with the old
    # resourceVersion) gets 409, topocast re-reads and keeps the new taint
    extra = {"key": "ops/maintenance", "value": "", "effect": "NoExecute"}

    def concurrent(_: FakeKubeApiServer) -> None:
        node = fake.get(NODES, "gpu-3")
        assert node is not None
        if extra not in (node["spec"].get("taints") or []):
            node["spec"]["taints"] = [*(node["spec"].get("taints") or []), extra]
            node.pop("status", None)
            fake.put(NODES, node, manager="ops")

    first_patch = lambda r: r.resource == "nodes" and r.method == "PATCH" and r.name == "gpu-3"  # noqa: E731
    fake.inject(None, 1, match=first_patch, action=concurrent)
    assert apply(fake, tmp_path, LEAF1).exit_code == 0
    assert [r.status for r in fake.calls("PATCH", resource="nodes") if r.name == "gpu-3"] == [409, 200]
    assert taints(fake, "gpu-3") == [extra, {"key": TAINT_KEY, "value": "switch.leaf-1", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ({"key": "a", "effect": "Sometimes"}, "Unsupported value"),
        ({"key": "a", "value": "x y", "effect": "NoSchedule"}, "a valid label"),
        ({"key": "bad key", "effect": "NoSchedule"}, "qualified name"),
    ],
)
def test_the_fake_refuses_taints_the_real_server_refuses(fake: FakeKubeApiServer, bad: dict, words: str) -> None:
    from k8s_fake_apiserver import ApiFailure

    node = fake.get(NODES, "gpu-1")
    assert node is not None
    node["spec"]["taints"] = [bad]
    with pytest.raises(ApiFailure, match=words):
        fake.put(NODES, node)
    node["spec"]["taints"] = [THEIRS, dict(THEIRS, value="other")]
    with pytest.raises(ApiFailure, match="unique by key and effect"):
        fake.put(NODES, node)


def test_the_cronjob_runs_a_command_the_cli_has_with_the_rights_it_needs() -> None:
    import re

    import yaml

    infra = Path(__file__).resolve().parent.parent / "infra" / "k8s"
    docs = [d for d in yaml.safe_load_all((infra / "health-cronjob.yaml").read_text()) if d]
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    job = next(d for d in docs if d["kind"] == "CronJob")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "topocast-health"
    script = pod["containers"][0]["args"][0]
    assert script.startswith("topocast health apply")
    help_text = invoke(["health", "apply", "--help"], {"COLUMNS": "200"}).output
    for flag in re.findall(r"(--[a-z][a-z-]+)", script):
        assert flag in help_text, flag
