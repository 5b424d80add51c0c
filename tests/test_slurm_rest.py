"""The slurmrestd live path against a real slurmctld + slurmrestd 26.05 (Debian sid chroot).

Each test starts a controller with auth/slurm + auth/jwt and its slurmrestd
(tests/slurmrest_fixtures.py) and drives ``topocast pull --via slurmrestd`` or the library the
way the agent does. What the controller must show afterwards is written in the test from the
files, never taken from our code; ``scontrol show topology`` is the controller's own reading.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from slurm_fixtures import SID_ROOT
from slurmrest_fixtures import NODES, TREE, TREE_MOVED, RestCluster, RestFactory

from topocast.model.hostlist import expand
from topocast.slurm.live import apply_topology
from topocast.slurm.rest import SUPPORTED, RestUpdater, connect

pytestmark = pytest.mark.slurm_current

TOPOCAST = [sys.executable, "-m", "topocast.cli"]
BLOCK = "BlockName=b1 Nodes=n[1-4]\nBlockName=b2 Nodes=n[5-8]\nBlockSizes=4,8\n"
BLOCK_MOVED = "BlockName=b1 Nodes=n[1-3,5]\nBlockName=b2 Nodes=n[4,6-8]\nBlockSizes=4,8\n"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def below(ctl: RestCluster) -> dict[str, set[str]]:
    return {sw: set(info.nodes) for sw, info in ctl.show_topology().items()}


def reconfigures(ctl: RestCluster) -> int:
    """How often the controller processed a reconfigure (its own log)."""
    return sum("reconfigure" in line.lower() for line in ctl.raw_log())


def pull_cli(ctl: RestCluster, src: Path, token: str | Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *TOPOCAST,
            "pull",
            "--source",
            f"file://{src}",
            "--dest",
            str(ctl.topology_path),
            "--slurm-conf",
            str(ctl.conf_path),
            "--slurm-root",
            str(SID_ROOT),
            "--via",
            "slurmrestd",
            ctl.url,
            "--token-from",
            str(token),
            "--live-max-share",
            "0.5",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=ctl.env(),
    )


@pytest.fixture
def tree(rest_cluster_factory: RestFactory) -> RestCluster:
    return rest_cluster_factory(NODES, TREE)


def test_tree_moves_by_bulk_post_with_zero_reconfigures(tree: RestCluster, tmp_path: Path) -> None:
    pid, before = tree.pid, reconfigures(tree)
    src = tmp_path / "topology.conf"
    src.write_text(TREE_MOVED)
    done = pull_cli(tree, src, tree.write_token(tmp_path / "jwt"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "applied live: 2 node(s) with 2 slurmrestd POST nodes calls, no reconfigure" in done.stdout, done.stdout
    assert below(tree) == {
        "root": set(expand("n[1-12]")),
        "spine1": set(expand("n[2-9]")),
        "spine2": set(expand("n[1,10-12]")),
        "leaf1": set(expand("n[2-4,9]")),
        "leaf2": set(expand("n[5-8]")),
        "leaf3": set(expand("n[1,10-12]")),
    }
    assert tree.topology_path.read_text() == TREE_MOVED  # the file for restarts
    assert tree.is_running() and tree.pid == pid and reconfigures(tree) == before
    assert tree.token not in done.stdout + done.stderr
    again = pull_cli(tree, src, tmp_path / "jwt", "--verbose")  # nothing new: nothing called
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stdout


def test_block_moves_by_bulk_post(rest_cluster_factory: RestFactory, tmp_path: Path) -> None:
    ctl = rest_cluster_factory(NODES[:8], BLOCK, topology_plugin="topology/block")
    pid, before = ctl.pid, reconfigures(ctl)
    src = tmp_path / "topology.conf"
    src.write_text(BLOCK_MOVED)
    done = pull_cli(ctl, src, ctl.write_token(tmp_path / "jwt"))
    assert done.returncode == 0 and "applied live" in done.stdout, done.stdout + done.stderr
    blocks = ctl.show_blocks()
    assert set(blocks["b1"].nodes) == set(expand("n[1-3,5]")) and set(blocks["b2"].nodes) == set(expand("n[4,6-8]"))
    assert ctl.pid == pid and reconfigures(ctl) == before


def test_every_supported_api_version_moves_and_reads_back(tree: RestCluster) -> None:
    token = read_token_text(tree)
    offered = connect(tree.url, token)
    assert offered.version == "v0.0.45" and offered.slurm_version == (26, 5)  # the newest wins
    for i, version in enumerate(SUPPORTED):
        client = connect(tree.url, token, version=version)
        node = f"n{i + 1}"
        client.set_topology([node], "default:root:spine2:leaf3")
        assert client.node_topologies([node]) == {node: "default:root:spine2:leaf3"}, version
        assert node in below(tree)["leaf3"], version
        assert client.ping() == (26, 5)


def read_token_text(ctl: RestCluster) -> Any:
    from topocast.slurm.rest_token import token_from_text

    return token_from_text(f"SLURM_JWT={ctl.token}", "test")


def test_a_bad_token_is_one_line_and_never_printed(tree: RestCluster, tmp_path: Path) -> None:
    src = tmp_path / "topology.conf"
    src.write_text(TREE_MOVED)
    bad = tmp_path / "bad-jwt"
    forged = tree.token[:-6] + ("AAAAAA" if not tree.token.endswith("AAAAAA") else "BBBBBB")
    bad.write_text(forged + "\n")
    bad.chmod(0o600)
    done = pull_cli(tree, src, bad)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused" in lines[0] and "Traceback" not in done.stderr, done.stderr
    assert forged not in done.stdout + done.stderr and forged[:20] not in done.stderr
    assert tree.topology_path.read_text() == TREE  # nothing installed


@pytest.mark.slow
def test_an_expired_token_is_named_as_expired(tree: RestCluster, tmp_path: Path) -> None:
    """slurmctld refuses a token past its ``exp``; the error says so with the time, not "wrong key"."""
    code, out, err = tree.scontrol("token", "username=root", "lifespan=1")
    assert code == 0, err
    token = tmp_path / "jwt"
    token.write_text(out)
    token.chmod(0o600)
    payload = out.strip().removeprefix("SLURM_JWT=").split(".")[1]
    exp = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"]
    expired_at = datetime.fromtimestamp(exp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    time.sleep(2.5)  # past its one-second lifespan
    src = tmp_path / "topology.conf"
    src.write_text(TREE_MOVED)
    done = pull_cli(tree, src, token)
    assert done.returncode == 2, done.stderr
    assert f"the token for user root was refused: it expired at {expired_at}" in done.stderr, done.stderr
    assert out.strip().removeprefix("SLURM_JWT=") not in done.stdout + done.stderr
    assert tree.topology_path.read_text() == TREE


# ----- forced failures: a proxy between the agent and slurmrestd -----------------------------------


def test_a_server_answering_another_topology_is_rolled_back(tree: RestCluster, rest_proxy: Any, tmp_path: Path) -> None:
    def rewrite(kind: str, method: str, path: str, body: bytes | None) -> bytes | None:
        if kind == "answer" and method == "GET" and path.endswith("/node/n9") and body:
            data = json.loads(body)
            data["nodes"][0]["topology"] = "default:root:spine2:leaf3"  # "n9 did not move"
            return json.dumps(data).encode()
        return body

    proxy = rest_proxy(tree.url, rewrite)
    shown_before = below(tree)
    data = TREE_MOVED.encode()
    updater = RestUpdater(connect(proxy.url, read_token_text(tree)))
    result = apply_topology(
        data, tree.topology_path, expected_sha256=sha(data), slurm_conf=tree.conf_path, install=tree.install,
        max_share=0.5, updater=updater,
    )  # fmt: skip
    assert not result.ok and result.action == "rolled_back" and result.failed_step == "read-back", result.message
    assert "node n9 reads back topology 'default:root:spine2:leaf3'" in result.message
    assert "nodes moved back" in result.message and "restored the previous file" in result.message
    assert tree.topology_path.read_text() == TREE
    assert below(tree) == shown_before  # n1 and n9 really moved, and really moved back
    assert tree.token not in result.message


def test_a_failing_second_destination_moves_the_first_back(tree: RestCluster, rest_proxy: Any, tmp_path: Path) -> None:
    posts: list[dict[str, Any]] = []

    def rewrite(kind: str, method: str, path: str, body: bytes | None) -> bytes | None:
        if kind == "request" and method == "POST" and body:
            data = json.loads(body)
            posts.append(data)
            if len(posts) == 2:  # the second destination: the controller refuses it (422, error 2178)
                data["topology_str"] = "default:nosuch:leaf9"
                return json.dumps(data).encode()
        return body

    proxy = rest_proxy(tree.url, rewrite)
    shown_before = below(tree)
    src = tmp_path / "topology.conf"
    src.write_text(TREE_MOVED)
    token = tree.write_token(tmp_path / "jwt")
    done = subprocess.run(
        [
            *TOPOCAST,
            "pull",
            "--source",
            f"file://{src}",
            "--dest",
            str(tree.topology_path),
            "--slurm-conf",
            str(tree.conf_path),
            "--slurm-root",
            str(SID_ROOT),
            "--via",
            "slurmrestd",
            proxy.url,
            "--token-from",
            str(token),
            "--live-max-share",
            "0.5",
            "--forbid-reconfigure",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=tree.env(),
    )
    assert done.returncode == 5, done.stdout + done.stderr  # 5: rolled back (docs/slurm-pull.md)
    said = done.stdout + done.stderr  # the report goes to stdout or the journal (stderr), by severity
    assert "rolled" in said and "error 2178" in said and "nodes moved back" in said, said
    assert len(posts) == 4  # two moves, two moves back (n1 and n9 each to its own old leaf)
    assert below(tree) == shown_before and tree.topology_path.read_text() == TREE


# ----- the publish target: the function moves nodes itself --------------------------------------


class DictObjects:
    """The ObjectStore calls the publisher makes, over a dict."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, dict[str, str]]] = {}

    def get(self, key: str, *, limit: int | None = None) -> Any:
        from topocast.pipeline.objects import StoredObject

        if key not in self.data:
            return None
        body, meta = self.data[key]
        return StoredObject(key, body, None, meta)

    def put(self, key: str, data: bytes, **kw: Any) -> Any:
        self.data[key] = (data, dict(kw.get("metadata") or {}))
        return 1


def manifest(generation: int, text: str) -> tuple[Any, dict[str, bytes]]:
    from topocast.ports.records import Manifest, ManifestEntry

    data = text.encode()
    entry = ManifestEntry("slurm-tree", "topology-tree.conf", sha(data), 12, size=len(data))
    return Manifest(generation, "g" * 64, (entry,)), {"topology-tree.conf": data}


def test_the_slurmrestd_publisher_moves_nodes_from_the_function(tree: RestCluster, tmp_path: Path) -> None:
    from topocast.config import settings_from_env
    from topocast.publish import PublisherInputs, build_publishers

    token = tree.write_token(tmp_path / "jwt")
    env = {
        "TOPOCAST_CLUSTER": "c1", "TOPOCAST_BUCKET": "b", "TOPOCAST_PUBLISHERS": "slurmrestd",
        "TOPOCAST_SLURMREST_URL": tree.url, "TOPOCAST_SLURMREST_TOKEN": f"file://{token}",
        "TOPOCAST_SLURMREST_MAX_SHARE": "0.5",
    }  # fmt: skip
    objects = DictObjects()
    (publisher,) = build_publishers(
        ["slurmrestd"], PublisherInputs(settings_from_env(env), lambda g: None, objects=objects)
    )  # type: ignore[arg-type]
    pid, before = tree.pid, below(tree)
    first = publisher.publish(*manifest(1, TREE))
    assert first.published and "baseline recorded, nothing moved" in first.detail
    moved = publisher.publish(*manifest(2, TREE_MOVED))
    assert moved.published and "2 node(s) moved live with 2 slurmrestd calls" in moved.detail, moved.detail
    shown = below(tree)
    assert shown["leaf1"] == set(expand("n[2-4,9]")) and shown["leaf3"] == set(expand("n[1,10-12]"))
    again = publisher.publish(*manifest(2, TREE_MOVED))
    assert again.published and "already applied" in again.detail
    older = publisher.publish(*manifest(1, TREE))
    assert not older.published and "generation 2 is applied" in older.detail
    # a deleted switch is not a live change: nothing is sent, the agent's reconfigure decides
    gone = (
        TREE_MOVED.replace("SwitchName=root Switches=spine[1-2]", "SwitchName=root Switches=spine1")
        .replace("SwitchName=spine2 Switches=leaf3\n", "")
        .replace("SwitchName=leaf3 Nodes=n[1,10-12]\n", "")
        .replace("leaf2 Nodes=n[5-8]", "leaf2 Nodes=n[1,5-8,10-12]")
    )
    held = publisher.publish(*manifest(3, gone))
    assert held.published and "not moved live (switch 'spine2' would be deleted)" in held.detail, held.detail
    assert below(tree) == shown and before != shown
    assert tree.pid == pid and tree.token not in first.detail + moved.detail + held.detail
