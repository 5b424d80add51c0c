"""Capacity per domain and fragmentation, with figures worked out by hand from Slurm's definition; the node
state parsers (scontrol, slurmrestd, kubectl) and the Prometheus exposition's format rules."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from topocast.errors import TopocastError
from topocast.k8s.workloads import node_states, parse_workload
from topocast.model.capacity import block_fragmentation, cluster_capacity, tree_fragmentation
from topocast.model.graph import TopologyGraph
from topocast.model.prometheus import capacity_families, exposition
from topocast.slurm.jobs import classify_state, parse_job, parse_node_states

BLOCKS = [[f"b{b}n{i}" for i in range(4)] for b in range(4)]  # 4 base blocks of 4 nodes
ALL = {n for block in BLOCKS for n in block}


def test_block_fragmentation_all_free_is_zero() -> None:
    assert block_fragmentation(BLOCKS, [4, 8, 16], ALL) == 0


def test_block_fragmentation_one_busy_node() -> None:
    # b1 is unavailable (3 of 4 free): base b1 (1) + aggregate b0-b1 (2) + aggregate b0-b3 (4) = 7 base
    # blocks = 28 nodes, plus the 1 unavailable node in blocks
    assert block_fragmentation(BLOCKS, [4, 8, 16], ALL - {"b1n2"}) == 29


def test_block_fragmentation_all_busy() -> None:
    # every base block (4) + both 2-block aggregates (2 x 2) + the 4-block aggregate (4) = 12 -> 48 nodes, + 16 nodes
    assert block_fragmentation(BLOCKS, [4, 8, 16], set()) == 64


def test_block_fragmentation_two_busy_blocks_in_one_aggregate() -> None:
    # b2 and b3 unavailable: bases 2, aggregate b2-b3 once (2), the 4-aggregate once (4) = 8 -> 32, + 2 nodes
    assert block_fragmentation(BLOCKS, [4, 8, 16], ALL - {"b2n0", "b3n1"}) == 34


def test_block_fragmentation_tail_quirk_of_the_plugin() -> None:
    # 3 base blocks, BlockSizes 4,8: b0-b1 free leave the 2-aggregate flag set, so the unavailable b2 (whose own
    # aggregate would not fit) is counted as 1 + 2 = 3 base blocks -> 12, + 1 unavailable node (the loop as written)
    blocks = BLOCKS[:3]
    avail = {n for b in blocks for n in b} - {"b2n0"}
    assert block_fragmentation(blocks, [4, 8], avail) == 13


def test_block_availability_is_by_count_of_the_base_size() -> None:
    # a block smaller than the base size is never available (Slurm: overlap >= bblock_node_cnt)
    assert block_fragmentation([["x1", "x2"]], [4], {"x1", "x2"}) == 4


def graph() -> TopologyGraph:
    nodes = [{"name": f"a{i}", "fabric": ["leaf-1", "spine-1"], "accelerator": "nvl-1"} for i in range(1, 5)]
    nodes += [{"name": f"b{i}", "fabric": ["leaf-2", "spine-1"], "accelerator": "nvl-2"} for i in range(1, 3)]
    nodes += [{"name": "c1", "fabric": ["leaf-3", "spine-2"], "accelerator": "nvl-2"}]
    return TopologyGraph.model_validate({"cluster": "c1", "provider": "model", "nodes": nodes})


def test_tree_fragmentation_counts_partly_used_switches() -> None:
    g = graph()
    everyone = {n.name for n in g.nodes}
    assert tree_fragmentation(g, everyone) == 0
    # a1 busy: leaf-1 (4 nodes) and spine-1 (6 nodes) are not fully free
    assert tree_fragmentation(g, everyone - {"a1"}) == 10
    # c1 busy too: leaf-3 (1) and spine-2 (1)
    assert tree_fragmentation(g, everyone - {"a1", "c1"}) == 12


def test_capacity_per_domain_and_largest_job() -> None:
    states = {"a1": "allocated", "a2": "free", "a3": "free", "a4": "drained", "b1": "free", "b2": "free", "zz": "free"}
    cap = cluster_capacity(graph(), states)  # type: ignore[arg-type]
    rows = {(d.level, d.name): d.counts for d in cap.domains}
    assert rows[("nvlink-domain", "nvl-1")] == {"free": 2, "allocated": 1, "drained": 1, "unknown": 0}
    assert rows[("nvlink-domain", "nvl-2")] == {"free": 2, "allocated": 0, "drained": 0, "unknown": 1}
    assert rows[("leaf", "leaf-3")] == {"free": 0, "allocated": 0, "drained": 0, "unknown": 1}
    assert cap.largest_free == {"nvlink-domain": 2, "leaf": 2}
    assert cap.totals == {"free": 4, "allocated": 1, "drained": 1, "unknown": 1}
    assert cap.not_in_graph == ["zz"]
    assert cap.block_fragmentation is None  # no block layout given


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("IDLE", "free"),
        ("IDLE+CLOUD+POWERED_DOWN", "free"),
        ("ALLOCATED", "allocated"),
        ("MIXED+COMPLETING", "allocated"),
        ("MIXED+DRAIN", "drained"),
        ("IDLE+DRAIN", "drained"),
        ("DOWN*", "drained"),
        ("IDLE*", "drained"),
        ("IDLE+MAINT+RESERVED", "drained"),
        (["IDLE", "DRAIN"], "drained"),
        (["ALLOCATED"], "allocated"),
    ],
)
def test_slurm_states(state: str | list[str], expected: str) -> None:
    assert classify_state(state) == expected


SCONTROL_NODES = """NodeName=gpu-001 Arch=x86_64 CoresPerSocket=48
   CPUAlloc=0 CPUEfctv=96 CPUTot=96 CPULoad=0.00
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A

NodeName=gpu-002 Arch=x86_64 CoresPerSocket=48
   State=MIXED+DRAIN ThreadsPerCore=1
   Reason=bad gpu [root@2026-12-01T09:00:00]
"""


def test_scontrol_show_nodes_both_layouts() -> None:
    assert parse_node_states(SCONTROL_NODES, "nodes.txt") == {"gpu-001": "free", "gpu-002": "drained"}
    oneline = "NodeName=n1 Arch=x86_64 State=ALLOCATED Partitions=gpu\nNodeName=n2 State=IDLE Partitions=gpu\n"
    assert parse_node_states(oneline, "x") == {"n1": "allocated", "n2": "free"}
    rest = json.dumps({"nodes": [{"name": "n1", "state": ["IDLE", "DRAIN"]}, {"name": "n2", "state": ["MIXED"]}]})
    assert parse_node_states(rest, "x") == {"n1": "drained", "n2": "allocated"}
    with pytest.raises(TopocastError, match=r"nodes\.txt: no NodeName= record"):
        parse_node_states("garbage", "nodes.txt")


SCONTROL_JOB = """JobId=4242 JobName=train
   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   SubmitTime=2026-12-01T09:59:00 EligibleTime=2026-12-01T09:59:00
   StartTime=2026-12-01T10:00:00 EndTime=2026-12-01T11:00:00 Deadline=N/A
   Partition=gpu AllocNode:Sid=head:1234
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=gpu-[001-003],gpu-010
   BatchHost=gpu-001
   NumNodes=4 NumCPUs=384 NumTasks=4 CPUs/Task=96 ReqB:S:C:T=0:0:*:*
     JOB_GRES=gpu:32
       Nodes=gpu-[001-003],gpu-010 CPU_IDs=0-95 Mem=0 GRES=gpu:8(IDX:0-7)
"""


@pytest.fixture
def utc_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """scontrol's times are the controller's local time: this process's zone, set to UTC for the test."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_scontrol_show_job(utc_zone: None) -> None:
    job = parse_job(SCONTROL_JOB, "job.txt")
    assert job.job == "4242"
    assert job.nodes == ("gpu-001", "gpu-002", "gpu-003", "gpu-010")
    assert job.start is not None and job.start.isoformat() == "2026-12-01T10:00:00+00:00"


def test_slurmrestd_job_and_refusals() -> None:
    doc = {"jobs": [{"job_id": 7, "nodes": "n[1-2]", "start_time": {"set": True, "infinite": False,
                                                                      "number": 1796119200}}]}  # fmt: skip
    job = parse_job(json.dumps(doc), "rest")
    assert job.nodes == ("n1", "n2") and job.start is not None and job.start.isoformat() == "2026-12-01T10:00:00+00:00"
    pending = SCONTROL_JOB.replace("NodeList=gpu-[001-003],gpu-010", "NodeList=(null)").replace("RUNNING", "PENDING")
    with pytest.raises(TopocastError, match=r"job.txt: job 4242 has no nodes \(JobState=PENDING\)"):
        parse_job(pending, "job.txt")
    with pytest.raises(TopocastError, match=r"job\.txt: 2 jobs"):
        parse_job(SCONTROL_JOB + SCONTROL_JOB, "job.txt")


def test_kubernetes_pods_workload_and_node_states() -> None:
    pods = {"items": [
        {"metadata": {"name": "w-0"}, "spec": {"nodeName": "n2"}, "status": {"startTime": "2026-12-01T10:00:05Z"}},
        {"metadata": {"name": "w-1"}, "spec": {"nodeName": "n1"}, "status": {"startTime": "2026-12-01T10:00:00Z"}},
        {"metadata": {"name": "w-2"}, "spec": {}, "status": {"phase": "Pending"}},
    ]}  # fmt: skip
    job = parse_workload(json.dumps(pods), "pods.json")
    assert job.nodes == ("n1", "n2") and job.start is not None and job.start.isoformat() == "2026-12-01T10:00:00+00:00"
    workload = {"kind": "Workload", "metadata": {"name": "wl"}, "status": {"admission": {"podSetAssignments": [
        {"name": "main", "topologyAssignment": {"levels": ["example.com/block", "kubernetes.io/hostname"],
                                                "domains": [{"values": ["b1", "n3"], "count": 1},
                                                            {"values": ["b1", "n4"], "count": 1}]}}]}}}  # fmt: skip
    assert parse_workload(json.dumps(workload), "wl.json").nodes == ("n3", "n4")
    workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["levels"][-1] = "example.com/rack"  # type: ignore[index]
    with pytest.raises(TopocastError, match="does not name nodes; give the workload's pods instead"):
        parse_workload(json.dumps(workload), "wl.json")
    ready = [{"type": "Ready", "status": "True"}]
    nodes = {"items": [
        {"metadata": {"name": "n1"}, "status": {"conditions": ready}},
        {"metadata": {"name": "n2"}, "status": {"conditions": ready}},
        {"metadata": {"name": "n3"}, "spec": {"unschedulable": True}, "status": {"conditions": ready}},
        {"metadata": {"name": "n4"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
        {"metadata": {"name": "n5"}, "status": {"conditions": ready}},
    ]}  # fmt: skip
    running = {"items": [
        {"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "ds", "ownerReferences": [{"kind": "DaemonSet"}]}, "spec": {"nodeName": "n5"},
         "status": {"phase": "Running"}},
    ]}  # fmt: skip
    got = node_states(json.dumps(nodes), "nodes.json", json.dumps(running))
    assert got == {"n1": "allocated", "n2": "free", "n3": "drained", "n4": "drained", "n5": "free"}


# The text format's rules (prometheus.io/docs/instrumenting/exposition_formats): written here, not computed by
# the code under test. A sample line: name{label="value",...} number; values escape \\, \" and \n.
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(?:{_LABEL})(?:,{_LABEL})*\}})? (-?[0-9.e+]+|NaN|[+-]Inf)$")


def check_exposition(text: str) -> dict[str, list[str]]:
    """Parse a text exposition, asserting its rules; family -> sample lines."""
    assert text.endswith("\n")
    families: dict[str, list[str]] = {}
    helped: set[str] = set()
    typed: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert re.fullmatch(_NAME, name) and name not in helped, line
            helped.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in {"counter", "gauge", "histogram", "summary", "untyped"} and name not in typed, line
            assert name not in families, "TYPE must come before the family's samples"
            typed[name] = kind
            current = name
            families[name] = []
        else:
            m = _SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            assert m.group(1) == current, f"sample of {m.group(1)} outside its family"
            families[current].append(line)
    return families


def test_prometheus_exposition_follows_the_text_format() -> None:
    g = TopologyGraph.model_validate(
        {
            "cluster": "c1",
            "provider": "model",
            "nodes": [
                {"name": "a1", "fabric": ["leaf-1"], "accelerator": "nvl-1"},
                {"name": "a2", "fabric": ["leaf-1"], "accelerator": "nvl-1"},
            ],
        }
    )
    cap = cluster_capacity(g, {"a1": "free", "a2": "allocated"}, [("block001", ("a1", "a2"))], [2])
    families = check_exposition(exposition(capacity_families(cap)))
    assert (
        'topocast_group_nodes{cluster="c1",level="leaf",group="leaf-1",state="free"} 1'
        in families["topocast_group_nodes"]
    )
    # block001 is unavailable (1 of 2 free): 1 base block x 2 nodes + 1 unavailable node
    assert families["topocast_block_fragmentation_nodes"] == ['topocast_block_fragmentation_nodes{cluster="c1"} 3']
    assert families["topocast_largest_free_nodes"] == [
        'topocast_largest_free_nodes{cluster="c1",level="nvlink-domain"} 1',
        'topocast_largest_free_nodes{cluster="c1",level="leaf"} 1',
        'topocast_largest_free_nodes{cluster="c1",level="block"} 1',
    ]


def test_prometheus_label_values_are_escaped() -> None:
    from topocast.model.prometheus import Family

    text = exposition([Family("x_total", 'a "help"\nline \\', [({"g": 'sw"1\\\n'}, 2.5)])])
    assert text == '# HELP x_total a "help"\\nline \\\\\n# TYPE x_total gauge\nx_total{g="sw\\"1\\\\\\n"} 2.5\n'
    check_exposition(text)


def test_real_scontrol_show_nodes_both_layouts(slurm_controller) -> None:  # type: ignore[no-untyped-def]
    """The text a real slurmctld prints: n3 drained by hand, the others UNKNOWN (no slurmd ever registered),
    so every node is out of service and none is free."""
    rc, _, err = slurm_controller.scontrol("update", "NodeName=n3", "State=DRAIN", "Reason=bad gpu")
    assert rc == 0, err
    _, text, _ = slurm_controller.scontrol("show", "nodes")
    _, oneline, _ = slurm_controller.scontrol("-o", "show", "nodes")
    assert "State=UNKNOWN+DRAIN" in text
    for out in (text, oneline):
        states = parse_node_states(out, "scontrol show nodes")
        assert sorted(states) == [f"n{i}" for i in range(1, 9)]
        assert set(states.values()) == {"drained"}


def test_scontrol_show_job_of_a_heterogeneous_job_is_its_components_together(utc_zone: None) -> None:
    one = SCONTROL_JOB.replace("JobId=4242 JobName=train", "JobId=4242 HetJobId=4242 HetJobOffset=0 JobName=train")
    two = one.replace("JobId=4242 HetJobId", "JobId=4243 HetJobId").replace("HetJobOffset=0", "HetJobOffset=1")
    two = two.replace("NodeList=gpu-[001-003],gpu-010", "NodeList=gpu-[020-021]").replace(
        "T10:00:00 End", "T10:00:02 End"
    )
    job = parse_job(one + "\n" + two, "het.txt")
    assert job.job == "4242" and job.nodes == ("gpu-001", "gpu-002", "gpu-003", "gpu-010", "gpu-020", "gpu-021")
    assert job.start is not None and job.start.isoformat() == "2026-12-01T10:00:00+00:00"


def test_slurmrestd_heterogeneous_job() -> None:
    het = {"set": True, "infinite": False, "number": 50}
    doc = {"jobs": [
        {"job_id": 50, "het_job_id": het, "nodes": "n[1-2]", "start_time": {"set": True, "number": 1796119260}},
        {"job_id": 51, "het_job_id": het, "nodes": "n7", "start_time": {"set": True, "number": 1796119200}},
    ]}  # fmt: skip
    job = parse_job(json.dumps(doc), "rest")
    assert job.job == "50" and job.nodes == ("n1", "n2", "n7")
    assert job.start is not None and job.start.isoformat() == "2026-12-01T10:00:00+00:00"
    doc["jobs"][1]["het_job_id"] = {"set": True, "infinite": False, "number": 0}  # type: ignore[index]
    with pytest.raises(TopocastError, match="2 jobs in 'jobs'; give one job"):
        parse_job(json.dumps(doc), "rest")
