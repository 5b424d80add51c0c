"""The same live change by the file path and by the REST path, on a real 26.05 slurmctld + slurmrestd.

One scratch controller (Debian sid chroot, auth/slurm + auth/jwt, its slurmrestd: see
``topocast_sim.slurmrest``) per topology kind, 2,000 nodes:

* tree: root -> 4 spines -> 40 leaves of 50 nodes;
* block: 40 blocks of 50 nodes (``BlockSizes=50``).

Each round applies a change that moves 20 nodes (to 4 destinations, 5 nodes each) through the
pull agent (:func:`topocast.agents.pull.pull`, ``file://`` source, live), alternately

* **file path**: atomic install of the file, one ``scontrol update NodeName=.. Topology=..`` per
  destination, ``scontrol show topology`` compared with the file;
* **REST path**: what ``pull --via slurmrestd URL --token-from FILE`` does: the token read from its
  file, API version discovered and the token checked (``GET /slurm/vX/diag/``), the same
  atomic install, one bulk ``POST /slurm/vX/nodes/`` per destination, every moved node read back.

The rounds alternate the direction (A -> B by one path, B -> A by the other), so both paths move
the same number of nodes each round. Validation with a throwaway controller is off for both (it
costs the same either way; ``--validate`` turns it on). After every round the controller must be
the same process, not reconfigured, and ``scontrol show topology`` must equal the installed file.

    .venv/bin/python bench/slurm_rest.py [--nodes 2000] [--moves 20] [--rounds 3] [--root /var/cache/topocast/slurm-sid]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from topocast.agents.pull import pull
from topocast.model.hostlist import compact_str
from topocast.slurm.controller import SlurmInstall, ensure_proc
from topocast.slurm.rest import RestUpdater, connect
from topocast.slurm.rest_token import read_token
from topocast.slurm.validate import verify_shown
from topocast_sim.slurmrest import RestCluster

PER_UNIT = 50
LEAVES_PER_SPINE = 10


def tree(groups: list[list[str]]) -> str:
    spines = -(-len(groups) // LEAVES_PER_SPINE)
    lines = [f"SwitchName=root Switches=spine[{0:02d}-{spines - 1:02d}]"]
    for s in range(spines):
        first, last = s * LEAVES_PER_SPINE, min(len(groups), (s + 1) * LEAVES_PER_SPINE) - 1
        lines.append(f"SwitchName=spine{s:02d} Switches=leaf[{first:03d}-{last:03d}]")
    lines += [f"SwitchName=leaf{i:03d} Nodes={compact_str(g)}" for i, g in enumerate(groups)]
    return "\n".join(lines) + "\n"


def block(groups: list[list[str]]) -> str:
    lines = [f"BlockName=b{i:03d} Nodes={compact_str(g)}" for i, g in enumerate(groups)]
    return "\n".join([*lines, f"BlockSizes={PER_UNIT}"]) + "\n"


def moved(groups: list[list[str]], moves: int) -> list[list[str]]:
    """``moves`` nodes swapped 5 for 5 between pairs of units (every unit keeps its size; 4 destinations
    for 20 moves)."""
    out = [list(g) for g in groups]
    for k in range(moves // 10):
        a, b = (k * 7) % len(groups), (k * 7 + len(groups) // 2) % len(groups)
        out[a], out[b] = sorted(out[a][5:] + out[b][:5]), sorted(out[b][5:] + out[a][:5])
    return out


def reconfigures(ctl: RestCluster) -> int:
    return sum("reconfigure" in line.lower() for line in ctl.raw_log())


def run_kind(
    kind: str, install: SlurmInstall, nodes: int, moves: int, rounds: int, validate: bool
) -> dict[str, list[float]]:
    names = [f"n{i:04d}" for i in range(nodes)]
    groups = [names[i : i + PER_UNIT] for i in range(0, nodes, PER_UNIT)]
    render = tree if kind == "tree" else block
    texts = [render(groups), render(moved(groups, moves))]
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-rest-{kind}-", dir=install.scratch_parent()))
    plugin = "topology/tree" if kind == "tree" else "topology/block"
    ctl = RestCluster(
        names, install=install, workdir=workdir, topology=texts[0], topology_plugin=plugin, start_timeout=60
    )
    times: dict[str, list[float]] = {"file": [], "rest": [], "connect": [], "check": []}
    try:
        ctl.start()
        ctl.url = ctl.start_rest()
        token = ctl.write_token(workdir / "jwt")
        os.environ["SLURM_SACK_SOCKET"] = ctl.env()["SLURM_SACK_SOCKET"]  # scontrol on this controller
        pid, before = ctl.pid, reconfigures(ctl)
        src = workdir / "published.conf"
        step = 0
        for _ in range(rounds):
            for path in ("file", "rest"):
                step += 1
                text = texts[step % 2]
                src.write_text(text)
                t0 = time.perf_counter()
                updater = None
                if path == "rest":  # as updater_from_cli does, timed step by step
                    token_value = read_token(str(token))
                    t1 = time.perf_counter()
                    updater = RestUpdater(connect(ctl.url, token_value))
                    times["connect"].append(t1 - t0)
                    times["check"].append(time.perf_counter() - t1)
                out = pull(
                    f"file://{src}", ctl.topology_path, reconfigure=False, validate=validate,
                    slurm_conf=ctl.conf_path, live=True, slurm=install, updater=updater,
                )  # fmt: skip
                times[path].append(time.perf_counter() - t0)
                if not out.ok or out.install is None or out.install.applied != "live":
                    raise SystemExit(f"{kind} {path}: not applied live: {out.line()}")
                problems = verify_shown(text, install.scontrol_command, ctl.env(), names, kind)
                if problems or ctl.pid != pid or not ctl.is_running() or reconfigures(ctl) != before:
                    raise SystemExit(f"{kind} {path}: controller differs or was restarted: {problems[:3]}")
        print(f"  {kind}: {len(times['file'])} rounds per path, pid {pid} unchanged, 0 reconfigures, "
              f"scontrol show topology equal to the file after every round")  # fmt: skip
    finally:
        ctl.stop()
        os.environ.pop("SLURM_SACK_SOCKET", None)
        shutil.rmtree(workdir, ignore_errors=True)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--moves", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--root", type=Path, default=Path("/var/cache/topocast/slurm-sid"))
    ap.add_argument("--validate", action="store_true", help="also validate each file with a throwaway controller")
    args = ap.parse_args()
    install = SlurmInstall.find(args.root)
    ensure_proc(args.root)
    print(f"slurmctld {install.version()} in {args.root}: {args.nodes} nodes, {args.moves} nodes moved per change, "
          f"validation {'on' if args.validate else 'off'}")  # fmt: skip
    results = {
        kind: run_kind(kind, install, args.nodes, args.moves, args.rounds, args.validate) for kind in ("tree", "block")
    }
    print(f"\n{'cluster':<8} {'file path (scontrol update)':>28} {'REST path (slurmrestd)':>24} {'REST / file':>12}")
    for kind, t in results.items():
        f, r = statistics.median(t["file"]), statistics.median(t["rest"])
        print(f"{kind:<8} {f * 1000:>25.0f} ms {r * 1000:>21.0f} ms {r / f:>11.2f}x")
    for kind, t in results.items():
        c, n = statistics.median(t["connect"]), statistics.median(t["check"])
        r = statistics.median(t["rest"])
        print(f"  {kind} REST path: reading the token {c * 1000:.0f} ms, "
              f"version discovery + token check (GET diag) {n * 1000:.0f} ms, install + POSTs + read-back "
              f"{(r - c - n) * 1000:.0f} ms")  # fmt: skip
    print(f"(medians of {args.rounds} rounds per path and cluster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
