"""Fabric health to the scheduler: seconds from a capacity block turning ``impaired`` to its nodes drained.

AWS EC2 on an in-process moto server with the simulator (``DescribeCapacityBlockStatus``), a real scratch
``slurmctld`` (Debian's, or ``--slurm-root`` for the 26.05 chroot) holding the cluster's nodes, and
``topocast health apply`` run in process, as the head node's timer runs it. Measured, per path:

* ``event``: an instance event of the cluster is delivered; the incremental discovery re-reads the block
  status, and health apply drains the block's nodes;
* ``poll``: no event; the reconcile's full discovery sees the status, and health apply drains;
* ``heal``: the block is ``ok`` again; a reconcile and health apply resume exactly topocast's drains.

topocast's own time is measured (discovery + apply, wall clock). The rest of the budget is configuration,
printed beside it: the debounce quiet window (the graph is rendered and published after it, default 15 s),
the health timer's interval (``infra/slurm/topocast-health.timer``, 30 s) and, for the poll path, the
reconcile schedule (``reconcile_schedule``). Target: event path within 60 s, poll path within one poll
interval (docs/health.md).

    .venv/bin/python bench/health_latency.py [--nodes 64] [--block 16] [--quiet 15] [--timer 30] [--poll 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--block", type=int, default=16, help="nodes per capacity block")
    ap.add_argument("--quiet", type=float, default=15.0, help="debounce quiet window (s)")
    ap.add_argument("--timer", type=float, default=30.0, help="health timer interval (s)")
    ap.add_argument("--poll", type=float, default=300.0, help="reconcile (poll) interval (s)")
    ap.add_argument("--slurm-root", type=Path, help="a chroot holding a current Slurm (e.g. the 26.05 sid)")
    args = ap.parse_args()

    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    import boto3
    from moto import mock_aws

    from topocast.cli.health import SlurmScheduler, run_apply
    from topocast.model.changes import InstanceChange
    from topocast.model.graph import TopologyGraph, dump_graph
    from topocast.model.health_plan import HealthPolicy
    from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_full, discover_instances
    from topocast.renderers import render
    from topocast.slurm.controller import SlurmController, SlurmInstall
    from topocast_sim import ec2 as sim

    sim.install()
    with mock_aws(), tempfile.TemporaryDirectory() as tmp:
        ec2 = boto3.client("ec2", region_name="us-east-1")
        blocks = args.nodes // args.block
        common: dict[str, Any] = {"cluster_tag": ("topocast:cluster", "c1"), "name_prefix": None, "block_size": None}
        ids = sim.generate_cluster(ec2, args.nodes, nodes_per_leaf=args.block, **common)
        for b in range(blocks):
            sim.add_capacity_block(f"cb-{b}", {f"cr-{b}": args.block})
        names = [f"gpu-{i:04d}" for i in range(args.nodes)]
        for i, iid in enumerate(ids):
            tags = {"Name": names[i], sim.CAPACITY_RESERVATION_TAG: f"cr-{i // args.block}"}
            ec2.create_tags(Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        config = AwsDiscoveryConfig(cluster="c1", filters=["tag:topocast:cluster=c1"], name_from="tag:Name",
                                    capacity_block_health=True)  # fmt: skip
        graph = discover_full(ec2, config).graph

        install = SlurmInstall.find(args.slurm_root) if args.slurm_root else None
        workdir = Path(tempfile.mkdtemp(dir=install.scratch_parent() if install else None))
        tree = render(graph, "slurm-tree").content  # 26.05 refuses to start without a topology
        ctl = SlurmController(names, topology=tree, workdir=workdir, **({"install": install} if install else {}))
        ctl.start()
        try:
            command = ctl.install.scontrol_command
            scontrol = command if isinstance(command, str) else " ".join(command)
            conf = Path(ctl.install.inside(ctl.conf_path))
            state = Path(tmp) / "state.json"
            policy = HealthPolicy(max_share=0.5)

            def apply(g: TopologyGraph) -> float:
                path = Path(tmp) / "g.json"
                path.write_text(dump_graph(g))
                start = time.perf_counter()
                with open(os.devnull, "w") as sink:
                    import contextlib

                    with contextlib.redirect_stdout(sink):
                        run_apply(str(path), SlurmScheduler(scontrol, conf), state_file=state, policy=policy)
                return time.perf_counter() - start

            def drained() -> set[str]:
                out = ctl.scontrol("show", "node", "-o")[1]
                return {
                    line.split()[0].removeprefix("NodeName=") for line in out.splitlines() if "Reason=topocast:" in line
                }

            def step(path: str, discover: Any, waits: float, target: float, want: set[str]) -> None:
                nonlocal graph
                t0 = time.perf_counter()
                graph = discover()
                discover_s = time.perf_counter() - t0
                apply_s = apply(graph)
                worst = discover_s + apply_s + waits
                print(json.dumps({
                    "path": path, "nodes": args.nodes, "discover_s": round(discover_s, 3),
                    "apply_s": round(apply_s, 3), "waits_s": waits, "worst_case_s": round(worst, 1),
                    "target_s": target, "within_target": worst <= target, "drained_as_expected": drained() == want,
                }))  # fmt: skip

            event = [InstanceChange(ids[-1], "upsert", "bench")]
            sim.set_capacity_block_status("cb-0", "impaired")
            step("event", lambda: discover_instances(ec2, config, graph, event).graph, args.quiet + args.timer,
                 60.0, set(names[: args.block]))  # fmt: skip
            sim.set_capacity_block_status("cb-1", "impaired")
            step("poll", lambda: discover_full(ec2, config, graph).graph, args.poll + args.quiet + args.timer,
                 args.poll + 60.0, set(names[: 2 * args.block]))  # fmt: skip
            sim.set_capacity_block_status("cb-0", "ok")
            sim.set_capacity_block_status("cb-1", "ok")
            step("heal", lambda: discover_full(ec2, config, graph).graph, args.poll + args.quiet + args.timer,
                 args.poll + 60.0, set())  # fmt: skip
        finally:
            ctl.stop()
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
