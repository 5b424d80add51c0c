"""``topocast publish`` against the fake API server: a kubeconfig, a graph file or a deployment's store,
the dry-run plan, then hand edits repaired by a second publish."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_runner import invoke
from k8s_fake_apiserver import CONFIGMAPS, KUEUE_TOPOLOGY, NODES, VOLCANO_HYPERNODE, FakeKubeApiServer
from test_k8s_publisher import DOMAIN, MANAGED, TIER, add_cluster_nodes, make_graph

from topocast.model.graph import dump_graph


@pytest.fixture
def fake() -> Iterator[FakeKubeApiServer]:
    with FakeKubeApiServer(token="cli-token") as server:
        yield server


def kubeconfig(tmp_path: Path, server: str, token: str = "cli-token") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": server}}],
                "users": [{"name": "me", "user": {"token": token}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "me"}}],
                "current-context": "fake",
            }
        )
    )
    return path


def run(*args: Any) -> Any:
    return invoke(["publish", *map(str, args)])


def test_dry_run_prints_the_plan_and_writes_nothing_then_publish_and_repair(
    fake: FakeKubeApiServer, tmp_path: Path
) -> None:
    graph = make_graph(16)
    add_cluster_nodes(fake, graph)
    (tmp_path / "g.json").write_text(dump_graph(graph))
    kc = kubeconfig(tmp_path, fake.url)
    spec = {"tier": 1, "members": [{"type": "Node", "selector": {"exactMatch": {"name": "x"}}}]}
    fake.put(VOLCANO_HYPERNODE, {"metadata": {"name": "foreign"}, "spec": spec})

    plan = run("--graph", tmp_path / "g.json", "--kubeconfig", kc, "--dry-run")

    assert plan.exit_code == 0, plan.output
    assert "dry run (client): nothing was written" in plan.stdout
    assert "nodes to patch: 16 (0 already current, 0 drifted)" in plan.stdout
    assert f"  node/gpu-0000: {DOMAIN}=nvl-0 {TIER}0=leaf-0 {TIER}1=spine-0 {TIER}2=core-0\n" in plan.stdout
    # Kueue + KAI Topology, HyperNodes leaf-0, spine-0, core-0, the ConfigMap
    assert "objects to apply: 6" in plan.stdout and "objects to delete: 0" in plan.stdout
    assert {r.method for r in fake.requests} == {"GET"}

    first = run("--graph", tmp_path / "g.json", "--kubeconfig", kc)

    assert first.exit_code == 0, first.output
    assert fake.get(NODES, "gpu-0003")["metadata"]["labels"][f"{TIER}0"] == "leaf-0"  # type: ignore[index]
    assert fake.get(KUEUE_TOPOLOGY, "topocast") is not None

    node = fake.get(NODES, "gpu-0003")
    node["metadata"]["labels"][f"{TIER}0"] = "leaf-7"  # type: ignore[index]
    fake.put(NODES, node, manager="kubectl-edit")  # type: ignore[arg-type]
    cm = fake.get(CONFIGMAPS, "slurm-config-extra", "slurm")
    cm["data"]["topology.conf"] = "# emptied by hand\n"  # type: ignore[index]
    fake.put(CONFIGMAPS, cm, manager="kubectl-edit")  # type: ignore[arg-type]

    again = run("--graph", tmp_path / "g.json", "--kubeconfig", kc, "--dry-run")
    assert "nodes to patch: 1 (15 already current, 1 drifted)" in again.stdout
    assert "v1 ConfigMap slurm/slurm-config-extra  (drifted: .data.topology.conf)" in again.stdout

    second = run("--graph", tmp_path / "g.json", "--kubeconfig", kc)

    assert second.exit_code == 0, second.output
    assert "drift=2" in second.stderr
    assert fake.get(NODES, "gpu-0003")["metadata"]["labels"][f"{TIER}0"] == "leaf-0"  # type: ignore[index]
    assert "SwitchName=leaf-0" in fake.get(CONFIGMAPS, "slurm-config-extra", "slurm")["data"]["topology.conf"]  # type: ignore[index]
    assert fake.get(VOLCANO_HYPERNODE, "foreign") is not None
    assert MANAGED not in (fake.get(VOLCANO_HYPERNODE, "foreign")["metadata"].get("labels") or {})  # type: ignore[index]


def test_bad_input_is_one_line_and_exit_2(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    kc = kubeconfig(tmp_path, fake.url)
    (tmp_path / "bad.json").write_text('{"cluster": "c", "provider": "x", "nodes": [{"name": "a b"}]}')
    (tmp_path / "g.json").write_text(dump_graph(make_graph(2)))

    for args, message in (
        (("--graph", tmp_path / "missing.json", "--kubeconfig", kc), "missing.json: cannot read"),
        (("--graph", tmp_path / "bad.json", "--kubeconfig", kc), "bad.json"),
        (("--kubeconfig", kc), "give exactly one of --graph FILE and --store"),
        (("--store", "ftp://x/y", "--kubeconfig", kc), "the scheme must be s3:// or gs://"),
        (("--graph", tmp_path / "g.json", "--kubeconfig", kc, "-f", "slurm-tree"), "--format slurm-tree: publish"),
        (("--graph", tmp_path / "g.json", "--kubeconfig", tmp_path / "nope"), "cannot load Kubernetes kubeconfig"),
    ):
        result = run(*args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("topocast: error: ") and message in lines[0], result.stderr
        assert "Traceback" not in result.output


def test_a_wrong_token_is_an_incomplete_publish_with_exit_1(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    graph = make_graph(4)
    add_cluster_nodes(fake, graph)
    (tmp_path / "g.json").write_text(dump_graph(graph))

    result = run("--graph", tmp_path / "g.json", "--kubeconfig", kubeconfig(tmp_path, fake.url, "wrong"))

    assert result.exit_code == 1
    assert "401" in result.stderr and "Traceback" not in result.output


def test_publish_from_a_deployments_s3_store_uses_the_rendered_files(
    fake: FakeKubeApiServer, tmp_path: Path, aws_env: str
) -> None:
    from topocast.app.render import render_generation
    from topocast.aws.clients import s3_client
    from topocast.aws.s3_artifacts import S3ArtifactStore
    from topocast.aws.s3_store import S3GraphStore

    s3 = s3_client()
    s3.create_bucket(Bucket="deploy")
    graphs, rendered = S3GraphStore("deploy", "tc", "c1", s3), S3ArtifactStore("deploy", "tc", "c1", s3)
    graph = make_graph(16)
    graphs.write_if_changed(graph, expected_generation=None)
    render_generation(graphs, rendered, None, ["slurm-tree", "k8s-labels", "kueue", "volcano"])
    add_cluster_nodes(fake, graph)

    result = run("--store", "s3://deploy/tc", "--cluster", "c1", "--kubeconfig", kubeconfig(tmp_path, fake.url))

    assert result.exit_code == 0, result.output
    assert "carries no instance IDs" not in result.stderr  # the stored graph was used for instance-ID matching
    assert fake.get(NODES, "gpu-0000")["metadata"]["labels"][f"{TIER}0"] == "leaf-0"  # type: ignore[index]
    assert fake.get(KUEUE_TOPOLOGY, "topocast")["metadata"]["annotations"]["topocast.dev/generation"] == "1"  # type: ignore[index]
    assert fake.get(CONFIGMAPS, "slurm-config-extra", "slurm") is None  # slinky was not rendered by the deployment


def test_the_cronjob_binds_its_service_account_to_the_roles_rbac_yaml_defines() -> None:
    infra = Path(__file__).resolve().parent.parent / "infra" / "k8s"
    roles = {
        (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace"))
        for d in yaml.safe_load_all((infra / "rbac.yaml").read_text())
        if d and d["kind"] in ("ClusterRole", "Role")
    }
    docs = [d for d in yaml.safe_load_all((infra / "publish-cronjob.yaml").read_text()) if d]
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert {b["kind"] for b in bindings} == {"ClusterRoleBinding", "RoleBinding"}
    for b in bindings:
        namespace = b["metadata"].get("namespace") if b["roleRef"]["kind"] == "Role" else None
        assert (b["roleRef"]["kind"], b["roleRef"]["name"], namespace) in roles
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": "topocast-publisher", "namespace": "topocast"}]
    job = next(d for d in docs if d["kind"] == "CronJob")
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "topocast-publisher"
    script = pod["containers"][0]["args"][0]
    assert "--provider k8s-labels" in script and "publish --in-cluster --graph /tmp/graph.json" in script


def test_publish_from_a_deployments_gcs_store(
    fake: FakeKubeApiServer, tmp_path: Path, local_gcs: Any, gcs_objects: Any, gcs_bucket: str, monkeypatch: Any
) -> None:
    from topocast.app.render import render_generation
    from topocast.gcp.gcs_artifacts import GcsArtifactStore
    from topocast.gcp.gcs_store import GcsGraphStore

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", local_gcs.url)
    graphs, rendered = GcsGraphStore(gcs_objects, "tc", "c1"), GcsArtifactStore(gcs_objects, "tc", "c1")
    graph = make_graph(16)
    graphs.write_if_changed(graph, expected_generation=None)
    graphs.write_if_changed(make_graph(16, fabric={0: ["leaf-1", "spine-0", "core-0"]}), expected_generation=1)
    render_generation(graphs, rendered, None, ["k8s-labels", "volcano"])
    add_cluster_nodes(fake, graph)
    kc = kubeconfig(tmp_path, fake.url)

    plan = run(
        "--store", f"gs://{gcs_bucket}/tc", "--cluster", "c1", "--kubeconfig", kc, "--generation", 2, "--dry-run"
    )

    assert plan.exit_code == 0, plan.output
    assert "nodes to patch: 16" in plan.stdout
    assert {r.method for r in fake.requests} == {"GET"}
    assert run("--store", f"gs://{gcs_bucket}/tc", "--cluster", "c1", "--kubeconfig", kc).exit_code == 0
    assert fake.get(NODES, "gpu-0000")["metadata"]["labels"][f"{TIER}0"] == "leaf-1"  # type: ignore[index]
