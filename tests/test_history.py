"""topocast history: the index written at commit, a node moved back and forth found at every time, the
fallback without an index, repair after a lost index write, a tampered generation refused, and score
against the generation live when the job started."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_runner import invoke

from topocast.model.graph import TopologyGraph, graph_from_json
from topocast.pipeline import history
from topocast.pipeline.dir_objects import DirObjects
from topocast.pipeline.store import ObjectGraphStore, commit

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)

#: generation -> node -> leaf (None: not in the graph); n1 moves leaf-1 -> leaf-2 -> leaf-1; n3 joins; n2 leaves
PLAN: dict[int, dict[str, str | None]] = {
    1: {"n1": "leaf-1", "n2": "leaf-2"},
    2: {"n1": "leaf-2", "n2": "leaf-2"},
    3: {"n1": "leaf-1", "n2": "leaf-2"},
    4: {"n1": "leaf-1", "n2": "leaf-2", "n3": "leaf-2"},
    5: {"n1": "leaf-1", "n3": "leaf-2"},
}


def graph_of(placement: dict[str, str | None]) -> TopologyGraph:
    nodes = [{"name": n, "fabric": [leaf, "spine-1"]} for n, leaf in sorted(placement.items()) if leaf]
    return TopologyGraph.model_validate({"cluster": "c1", "provider": "model", "nodes": nodes})


def store_at(root: Path) -> ObjectGraphStore:
    return ObjectGraphStore(DirObjects(root), "", "c1")


def write_generations(root: Path, gens: range = range(1, 6)) -> ObjectGraphStore:
    """Generation g committed at T0 + (g - 1) hours (a simulated clock)."""
    store = store_at(root)
    for g in gens:
        store.clock = lambda g=g: T0 + (g - 1) * HOUR  # type: ignore[misc]
        result = commit(store, lambda _current, g=g: graph_of(PLAN[g]))
        assert result.generation == g and result.changed
    return store


def expected_leaf(node: str, at: datetime) -> str | None:
    """Worked out from PLAN, not from the index: the last generation written at or before ``at``."""
    live = [g for g in PLAN if T0 + (g - 1) * HOUR <= at]
    return PLAN[max(live)].get(node) if live else None


TIMES = [T0 - HOUR, T0, T0 + 30 * timedelta(minutes=1), T0 + HOUR, T0 + 90 * timedelta(minutes=1), T0 + 2 * HOUR,
         T0 + 3 * HOUR + timedelta(seconds=1), T0 + 4 * HOUR, T0 + 10 * HOUR]  # fmt: skip


def test_index_is_written_at_commit_and_names_every_place(tmp_path: Path) -> None:
    write_generations(tmp_path)
    data = json.loads((tmp_path / "c1" / "graphs" / "index.json").read_text())
    assert [e["generation"] for e in data["generations"]] == [1, 2, 3, 4, 5]
    assert data["generations"][1]["moved"] == {"n1": {"f": ["leaf-2", "spine-1"]}}
    assert data["generations"][3]["joined"] == {"n3": {"f": ["leaf-2", "spine-1"]}}
    assert data["generations"][4]["left"] == ["n2"]
    index = history.load(store_at(tmp_path))
    for at in TIMES:
        for name in ("n1", "n2", "n3"):
            _, place = index.place_at(name, at)
            got = place["f"][0] if place else None
            assert got == expected_leaf(name, at), (name, at)


@pytest.mark.parametrize("at", TIMES)
def test_history_at_names_the_right_place_from_the_cli(tmp_path: Path, at: datetime) -> None:
    write_generations(tmp_path)
    r = invoke(["history", "--store", tmp_path, "--cluster", "c1", "--node", "n1", "--at", at.isoformat(), "--json"])
    if at < T0:
        assert r.exit_code == 2 and "no generation was live at" in r.stderr
        return
    assert r.exit_code == 0, r.stderr
    place = json.loads(r.stdout)["node"]["place"]
    assert (place["f"][0] if place else None) == expected_leaf("n1", at)


def test_node_changes_and_graph_at_a_time(tmp_path: Path) -> None:
    write_generations(tmp_path)
    r = invoke(["history", "--store", tmp_path.as_uri(), "--cluster", "c1", "--node", "n1"])
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert [line.split()[3] for line in lines] == ["joined", "moved", "moved"]
    assert "spine-1 > leaf-2" in lines[1] and "spine-1 > leaf-1" in lines[2]
    out = tmp_path / "at.json"
    r = invoke(["history", "--store", tmp_path, "--cluster", "c1", "--at", "2026-12-01T11:30Z", "--out", out])
    assert r.exit_code == 0, r.stderr
    assert graph_from_json(out.read_bytes()).content_hash() == graph_of(PLAN[2]).content_hash()


def test_without_an_index_the_generations_are_read(tmp_path: Path) -> None:
    write_generations(tmp_path)
    graphs = tmp_path / "c1" / "graphs"
    (graphs / "index.json").unlink()
    for g in PLAN:  # the object's time is what a bucket reports as written
        stamp = (T0 + (g - 1) * HOUR).timestamp()
        os.utime(graphs / f"{g:012d}.json", (stamp, stamp))
    index = history.load(store_at(tmp_path))
    assert [e["generation"] for e in index.entries] == [1, 2, 3, 4, 5]
    for at in TIMES:
        _, place = index.place_at("n1", at)
        assert (place["f"][0] if place else None) == expected_leaf("n1", at)


def test_a_lost_index_write_is_repaired_by_the_next_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_generations(tmp_path, range(1, 3))
    monkeypatch.setattr(history, "record", lambda *a, **k: None)  # the process died before the index write
    write_generations_from = write_generations
    store = write_generations_from(tmp_path, range(3, 4))
    assert history._read(store)[0].last_generation == 2  # type: ignore[union-attr]
    monkeypatch.undo()
    write_generations(tmp_path, range(4, 6))
    index, _ = history._read(store_at(tmp_path))
    assert index is not None and [e["generation"] for e in index.entries] == [1, 2, 3, 4, 5]
    assert index.entries[2]["moved"] == {"n1": {"f": ["leaf-1", "spine-1"]}}


def test_a_tampered_generation_is_refused(tmp_path: Path) -> None:
    write_generations(tmp_path)
    path = tmp_path / "c1" / "graphs" / "000000000002.json"
    path.write_text(path.read_text().replace("leaf-2", "leaf-9"))
    r = invoke(
        ["history", "--store", tmp_path, "--cluster", "c1", "--at", "2026-12-01T11:30Z", "--out", tmp_path / "x"]
    )
    assert r.exit_code == 2
    assert r.stderr.startswith("topocast: error: ") and "000000000002.json" in r.stderr and "sha256" in r.stderr
    assert "Traceback" not in r.output and not (tmp_path / "x").exists()


def test_score_uses_the_generation_live_when_the_job_started(tmp_path: Path) -> None:
    write_generations(tmp_path)
    job = tmp_path / "job.json"
    # started at 11:30 UTC: generation 2, where n1 and n2 share leaf-2 (at 10:30 they were on two leaves)
    job.write_text(
        json.dumps(
            {"jobs": [{"job_id": 9, "nodes": "n[1-2]", "start_time": {"number": int((T0 + 1.5 * HOUR).timestamp())}}]}
        )
    )
    r = invoke(["score", "--store", tmp_path, "--cluster", "c1", "--slurm-job", job, "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["graph"].startswith("generation 2 ")
    assert {lv["level"]: (lv["spanned"], lv["minimum"]) for lv in doc["levels"]} == {"tier-0": (1, 1), "tier-1": (1, 1)}
    r = invoke(
        ["score", "--store", tmp_path, "--cluster", "c1", "--slurm-job", job, "--at", "2026-12-01T10:30Z", "--json"]
    )
    assert json.loads(r.stdout)["levels"][0]["spanned"] == 2


def test_slurm_jobcomp_script_appends_one_line_per_job(tmp_path: Path) -> None:
    """infra/slurm/topocast-score-job.sh as Slurm's jobcomp/script runs it (JOBID, NODES, START)."""
    import subprocess
    import sys

    write_generations(tmp_path / "store")
    script = Path(__file__).resolve().parent.parent / "infra" / "slurm" / "topocast-score-job.sh"
    log = tmp_path / "log" / "scores.jsonl"
    env = {
        "PATH": os.environ["PATH"],
        "TOPOCAST": str(Path(sys.executable).with_name("topocast")),
        "TOPOCAST_STORE": str(tmp_path / "store"),
        "TOPOCAST_CLUSTER": "c1",
        "TOPOCAST_SCORE_LOG": str(log),
    }
    for job, start in (("77", T0 + 1.5 * HOUR), ("78", T0 - HOUR)):
        run = {**env, "JOBID": job, "NODES": "n[1-2]", "START": str(int(start.timestamp()))}
        assert subprocess.run(["bash", str(script)], env=run, check=False).returncode == 0
    first, second = (json.loads(line) for line in log.read_text().splitlines())
    assert first["job"] == "77" and first["score"] == 1.0 and first["graph"].startswith("generation 2 ")
    assert second["job"] == "78" and "no generation was live" in second["error"]


def test_history_from_s3_as_the_aws_store_writes_it(aws_env: str) -> None:
    """The same generations committed by the AWS store (moto S3), read back by ``history --store s3://``."""
    from topocast.aws.clients import s3_client
    from topocast.aws.s3_store import S3GraphStore

    s3 = s3_client()
    s3.create_bucket(Bucket="hist")
    store = S3GraphStore("hist", "topocast", "c1", s3)
    for g in PLAN:
        store.clock = lambda g=g: T0 + (g - 1) * HOUR  # type: ignore[misc]
        commit(store, lambda _current, g=g: graph_of(PLAN[g]))
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket="hist")["Contents"]}
    assert "topocast/c1/graphs/index.json" in keys
    for at in TIMES[1:]:
        r = invoke(["history", "--store", "s3://hist/topocast", "--cluster", "c1", "--node", "n1", "--at",
                    at.isoformat(), "--json"])  # fmt: skip
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["node"]["place"]["f"][0] == expected_leaf("n1", at)


@pytest.mark.parametrize("damage", ["not json", "other cluster", "stale last entry"])
def test_a_damaged_index_is_set_aside_and_the_generations_read(tmp_path: Path, damage: str) -> None:
    write_generations(tmp_path)
    path = tmp_path / "c1" / "graphs" / "index.json"
    data = json.loads(path.read_text())
    if damage == "not json":
        path.write_text("{not json")
    elif damage == "other cluster":
        path.write_text(json.dumps({**data, "cluster": "c9"}))
    else:  # an index whose last entry is not the generation latest.json names
        data["generations"][-1]["sha256"] = "0" * 64
        path.write_text(json.dumps(data))
    index = history.load(store_at(tmp_path))
    assert [e["generation"] for e in index.entries] == [1, 2, 3, 4, 5]
    assert index.entries[-1]["sha256"] == graph_of(PLAN[5]).content_hash()


def test_the_next_commit_rebuilds_a_damaged_index(tmp_path: Path) -> None:
    write_generations(tmp_path, range(1, 5))
    path = tmp_path / "c1" / "graphs" / "index.json"
    path.write_text("{not json")
    write_generations(tmp_path, range(5, 6))
    data = json.loads(path.read_text())
    assert [e["generation"] for e in data["generations"]] == [1, 2, 3, 4, 5]
    assert data["generations"][4]["left"] == ["n2"]


def test_a_store_older_than_the_index_is_indexed_without_reading_its_past(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 generations written before the index existed; the first commit after the upgrade reads none of them
    (a commit stays quick), and a reader asking about their time reads them then."""
    store = store_at(tmp_path)
    leaf = {g: "leaf-1" if g % 2 else "leaf-2" for g in range(1, 22)}  # n1 moves at every generation
    monkeypatch.setattr(history, "record", lambda *a, **k: None)
    for g in range(1, 21):
        store.clock = lambda g=g: T0 + (g - 1) * HOUR  # type: ignore[misc]
        commit(store, lambda _current, g=g: graph_of({"n1": leaf[g], "n2": "leaf-2"}))
        stamp = (T0 + (g - 1) * HOUR).timestamp()
        os.utime(tmp_path / "c1" / "graphs" / f"{g:012d}.json", (stamp, stamp))
    monkeypatch.undo()
    reads: list[int] = []
    real_get = ObjectGraphStore.get
    monkeypatch.setattr(ObjectGraphStore, "get", lambda self, g: reads.append(g) or real_get(self, g))
    store.clock = lambda: T0 + 20 * HOUR
    commit(store, lambda _current: graph_of({"n1": leaf[21], "n2": "leaf-2"}))
    assert reads == []  # latest() was read by commit itself; nothing else
    data = json.loads((tmp_path / "c1" / "graphs" / "index.json").read_text())
    assert [e["generation"] for e in data["generations"]] == [21]
    assert sorted(data["generations"][0]["joined"]) == ["n1", "n2"]
    monkeypatch.undo()
    for hours in (0.5, 4.5, 11.5, 19.5, 20.5):
        at = T0 + hours * HOUR
        index = history.load(store_at(tmp_path), since=at)
        _, place = index.place_at("n1", at)
        assert place is not None and place["f"][0] == leaf[int(hours) + 1], hours
    assert [e["generation"] for e in history.load(store_at(tmp_path), complete=True).entries] == list(range(1, 22))


def test_history_from_cloud_storage_as_the_gcp_store_writes_it(
    gcs_objects: Any, local_gcs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The generations committed by the GCP store (local Cloud Storage), read back by ``history --store gs://``."""
    from topocast.gcp.gcs_store import GcsGraphStore

    store = GcsGraphStore(gcs_objects, "topocast", "c1")
    for g in PLAN:
        store.clock = lambda g=g: T0 + (g - 1) * HOUR  # type: ignore[misc]
        commit(store, lambda _current, g=g: graph_of(PLAN[g]))
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", local_gcs.url)
    for at in TIMES[1:]:
        r = invoke(["history", "--store", f"gs://{gcs_objects.bucket_name}/topocast", "--cluster", "c1", "--node", "n1",
                    "--at", at.isoformat(), "--json"])  # fmt: skip
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)["node"]["place"]["f"][0] == expected_leaf("n1", at)


@pytest.mark.parametrize(
    ("store", "says"),
    [
        ("s3://no-such-bucket-here/topocast", "--store s3://no-such-bucket-here/topocast: cannot read (An error"),
        ("s3://Bad_Bucket!/x", "'Bad_Bucket!' is not a bucket name"),
        ("gs://-x-/y", "'-x-' is not a bucket name"),
    ],
)
def test_a_store_that_cannot_be_read_is_one_line(aws_env: str, store: str, says: str) -> None:
    r = invoke(["history", "--store", store, "--cluster", "c1", "--node", "n1"])
    assert r.exit_code == 2 and r.stderr.startswith("topocast: error: ") and says in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1
