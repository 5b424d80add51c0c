"""The GCP pipeline end to end under faults: failing writes, a lost half, a corrupt graph; and the demo.

Same harness as test_gcp_pipeline.py (:class:`topocast_sim.gcp_pipeline.LocalGcpPipeline`),
the same scenarios as the AWS pipeline tests; none measures latency, so windows, retries and leases
run on the simulated clock (``real_time=False``).
"""

from __future__ import annotations

import json
from pathlib import Path

from gcp_pipeline_helpers import cluster, fresh_stats, names, published  # noqa: F401  (fresh_stats: autouse)

from topocast.gcp import handlers
from topocast.model.graph import load_graph
from topocast_sim.gcp_pipeline import LocalGcpPipeline


def test_failing_gcs_writes_are_retried_and_no_event_is_lost() -> None:
    gen = cluster(30)
    with LocalGcpPipeline(gen, name="c1", quiet=1.0, window=0.5, real_time=False) as pl:
        pl.gcs.proxy.fail_uploads = 2  # google-cloud-storage retries 503s; nothing may be lost
        pl.emit(pl.insert_events(gen.instances)[1::2])
        assert pl.run_until_idle(timeout=60)
        assert pl.gcs.proxy.injected == 2
        assert len(names(pl)) == 30 and published(pl).generation >= 1


def test_losing_half_the_nodes_is_held_until_a_reconcile_confirms() -> None:
    gen = cluster(40)
    with LocalGcpPipeline(gen, name="c1", quiet=0.5, window=0.3, real_time=False) as pl:
        pl.reconcile()
        assert pl.run_until_idle(timeout=30)
        first = published(pl)
        assert "gpu-[032-039]" in first.content.decode()
        gone = gen.instances[20:]
        for inst in gone:
            pl.compute.remove("us-central1-a", inst["name"])
        deletes = [e for pair in zip(*[iter(pl.insert_events(gone))] * 2, strict=True) for e in pair[1:]]
        for attrs, data in deletes:  # the completing entries of instances.delete
            data["protoPayload"]["methodName"] = attrs["methodname"] = "v1.compute.instances.delete"
        pl.emit(deletes)
        assert pl.run_until_idle(timeout=30)
        assert handlers.STATS["held"] == 1
        assert published(pl).content == first.content  # the last good config stays
        assert len(names(pl)) == 20  # the graph itself is current; only the publish is held
        pl.reconcile()  # a full scan sees the same loss: confirmed, published
        assert pl.run_until_idle(timeout=30)
        now = published(pl)
        assert now.generation > first.generation and "gpu-[032-039]" not in now.content.decode()


def test_corrupt_graph_stops_render_and_the_last_publish_stays() -> None:
    gen = cluster(20)
    with LocalGcpPipeline(gen, name="c1", quiet=0.5, window=0.3, real_time=False) as pl:
        pl.reconcile()
        assert pl.run_until_idle(timeout=30)
        good = published(pl)
        rt = pl.runtime()
        stored = rt.graphs.latest()
        rt.objects.put(rt.graphs.generation_key(stored.generation), b'{"schema_version": 1, "cluster": "c1", "no')
        rt.debouncer.note_change("c1", stored.generation + 1)  # as if discover wrote again
        assert pl.run_until_idle(timeout=15)
        # retried by the debouncer, then given up (dead-lettered): render_attempts failures in a row
        assert handlers.STATS["renders"] == 1 and handlers.STATS["render_failures"] == 3
        assert handlers.STATS["render_dead_lettered"] == 1
        assert published(pl).content == good.content
        pl.reconcile()  # a full scan finds the same VMs: the damaged generation is restored in place
        assert pl.run_until_idle(timeout=15)
        healed = rt.graphs.latest()
        assert healed.generation == stored.generation and healed.graph == stored.graph
        assert published(pl).content == good.content


def test_demo_writes_its_outputs(tmp_path: Path) -> None:
    from topocast_sim.gcp_demo import run_gcp_demo

    out = tmp_path / "demo"
    report = run_gcp_demo(64, 32, out, None, 0.5, window=0.3)
    assert json.loads((out / "report.json").read_text()) == report
    assert report["events"] == 1 + 2 * 32  # the reconcile, then first + last entry per VM
    assert report["nodes"] == 64 and report["nodes_without_topology"] == 2
    assert report["publishes"] >= 1 and report["renders"] >= 1 and report["idle"]
    assert report["compute_api_calls"] == report["api_calls"] >= 2 and report["settle_seconds"] > 0
    assert len(load_graph(out / "graph.json").nodes) == 64  # feeds render --graph, diff and render --previous
    assert report["pull"]["ok"]
    conf = (out / "topology.conf").read_text()
    assert "gpu-062" not in conf and "gpu-063" not in conf  # no fabric: left out of the tree (one root)
    assert len(json.loads((out / "labels.json").read_text())) == 64
    assert "<svg" in (out / "topology.html").read_text()


def test_gke_publisher_is_wired_through_the_runtime() -> None:
    """publishers=gcs;kubernetes: the same generation reaches the Slurm object and the GKE node labels."""
    from k8s_fake_apiserver import NODES, FakeKubeApiServer

    gen = cluster(12)
    fake = FakeKubeApiServer(token="t0k").start()
    try:
        env = {"TOPOCAST_PUBLISHERS": "gcs;kubernetes", "TOPOCAST_K8S_ENDPOINT": fake.url, "TOPOCAST_K8S_TOKEN": "t0k"}
        for inst in gen.instances:  # GKE node name = VM name; providerID gce://PROJECT/ZONE/NAME
            zone = inst["zone"].rsplit("/", 1)[-1]
            fake.add_node(inst["name"], {"team": "ml"}, provider_id=f"gce://{gen.project}/{zone}/{inst['name']}")
        with LocalGcpPipeline(gen, name="c1", quiet=0.5, window=0.3, extra_env=env, real_time=False) as pl:
            pl.reconcile()
            assert pl.run_until_idle(timeout=30)
            assert handlers.STATS["publishes"] == 1 and published(pl).generation == 1
            graph = pl.runtime().graphs.latest().graph
            for node in graph.nodes:
                labels = fake.get(NODES, node.name)["metadata"]["labels"]
                assert labels["team"] == "ml"  # a foreign label untouched
                assert labels["fabric.topograph.run/tier-0"] == node.fabric[0]
    finally:
        fake.stop()
