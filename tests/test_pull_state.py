"""The pull agent's generation state: keyed by source and the resolved destination, a bound on a source
that stays behind, and generations outside 0..10**12 refused. All through the real CLI, with SSM faked
at ``boto3.client`` (the agent builds its own client)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from cli_runner import Result, invoke

from topocast.publish import envelope


def conf(n: int) -> bytes:
    return f"SwitchName=s1 Nodes=n[1-{n}]\n".encode()


class Ssm:
    """get_parameter over a dict of parameter name -> envelope text."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def publish(self, name: str, content: bytes, generation: int) -> None:
        env = envelope.plan_value(content, generation=generation, file="topology.conf", fmt="slurm-tree", s3_uri="-")
        self.values[name] = env.dumps()

    def get_parameter(self, Name: str, WithDecryption: bool = False) -> dict[str, Any]:
        return {"Parameter": {"Name": Name, "Value": self.values[Name]}}


@pytest.fixture
def ssm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    fake = Ssm()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir(mode=0o755)
    with mock.patch("boto3.client", lambda *a, **kw: fake):
        yield fake


def pull(name: str, dest: str | Path, *extra: str) -> Result:
    return invoke(
        ["pull", "--source", f"ssm://{name}", "--dest", dest, "--no-validate", "--state-file", "state.json", *extra]
    )


def test_another_spelling_of_the_destination_is_the_same_state(ssm: Ssm, tmp_path: Path) -> None:
    ssm.publish("/c/tree", conf(8), 5)
    assert pull("/c/tree", "d/topology.conf").exit_code == 0
    ssm.publish("/c/tree", conf(8) + b"# older\n", 4)
    behind = pull("/c/tree", f"{tmp_path}/d/topology.conf")
    assert behind.exit_code == 0 and behind.stderr == ""
    assert behind.stdout == (
        f"<4>{tmp_path}/d/topology.conf: skipped generation 4: ssm:///c/tree holds generation 4, older than the "
        "installed 5; kept (run 1 of 10 before this fails as stale)\n"
    )
    assert (tmp_path / "d/topology.conf").read_bytes() == conf(8)
    state = json.loads((tmp_path / "state.json").read_text())
    assert list(state["destinations"]) == [f"{tmp_path}/d/topology.conf"]


def test_a_new_source_is_a_logged_re_baseline(ssm: Ssm, tmp_path: Path) -> None:
    ssm.publish("/prod/tree", conf(8), 5)
    assert pull("/prod/tree", "d/topology.conf").exit_code == 0
    ssm.publish("/staging/tree", conf(9), 2)
    moved = pull("/staging/tree", "d/topology.conf")
    assert moved.exit_code == 0
    (line,) = moved.stdout.splitlines()
    assert line.startswith(f"<5>{tmp_path}/d/topology.conf: installed generation 2 (sha256 ")
    assert line.endswith(
        "; new source (was ssm:///prod/tree, generation 5): the generation check starts over from this one"
    )
    assert (tmp_path / "d/topology.conf").read_bytes() == conf(9)
    ssm.publish("/staging/tree", conf(9) + b"# older\n", 1)
    assert "older than the installed 2" in pull("/staging/tree", "d/topology.conf").stdout


def test_a_source_that_stays_behind_fails_after_the_bound_and_recovers(ssm: Ssm, tmp_path: Path) -> None:
    ssm.publish("/c/tree", conf(8), 7)
    assert pull("/c/tree", "d/topology.conf").exit_code == 0
    ssm.publish("/c/tree", conf(8) + b"# older\n", 3)
    runs = [pull("/c/tree", "d/topology.conf", "--stale-after", "3") for _ in range(4)]
    assert [r.exit_code for r in runs] == [0, 0, 7, 7]
    assert "(run 2 of 3 before this fails as stale)" in runs[1].stdout
    assert runs[2].stdout == "" and runs[2].stderr.startswith(
        f"<3>{tmp_path}/d/topology.conf: stale generation 3: ssm:///c/tree holds generation 3, older than the "
        "installed 7, for 3 runs in a row (since "
    )
    assert json.loads(pull("/c/tree", "d/topology.conf", "--stale-after", "3", "--json").stdout)["behind_runs"] == 5
    ssm.publish("/c/tree", conf(9), 8)
    caught_up = pull("/c/tree", "d/topology.conf", "--stale-after", "3")
    assert caught_up.exit_code == 0 and "installed generation 8" in caught_up.stdout
    ssm.publish("/c/tree", conf(9) + b"# older\n", 6)
    assert "(run 1 of 3" in pull("/c/tree", "d/topology.conf", "--stale-after", "3").stdout, "the count started over"


@pytest.mark.parametrize("generation", [10**30, -1, 10**12 + 1])
def test_a_generation_outside_the_range_is_refused(ssm: Ssm, tmp_path: Path, generation: int) -> None:
    value = json.loads(
        envelope.plan_value(conf(8), generation=1, file="topology.conf", fmt="slurm-tree", s3_uri="-").dumps()
    )
    ssm.values["/c/tree"] = json.dumps({**value, "generation": generation})
    result = pull("/c/tree", "d/topology.conf")
    assert result.exit_code == 3 and result.stdout == ""
    assert result.stderr == (
        f"<3>{tmp_path}/d/topology.conf: refused: SSM parameter /c/tree: generation {generation} is outside "
        "0..1000000000000; refusing it; nothing written\n"
    )
    assert not (tmp_path / "d/topology.conf").exists()


def test_the_largest_generation_is_accepted(ssm: Ssm, tmp_path: Path) -> None:
    ssm.publish("/c/tree", conf(8), 10**12)
    assert "installed generation 1000000000000" in pull("/c/tree", "d/topology.conf").stdout


def test_the_first_state_format_is_read(ssm: Ssm, tmp_path: Path) -> None:
    """A state file written before the keying (one flat entry, --dest as spelled) still stops a regress."""
    (tmp_path / "d/topology.conf").write_bytes(conf(8))
    (tmp_path / "state.json").write_text(
        json.dumps({"source": "ssm:///c/tree", "dest": "d/topology.conf", "generation": 5, "sha256": "x"})
    )
    ssm.publish("/c/tree", conf(9), 4)
    assert "older than the installed 5" in pull("/c/tree", f"{tmp_path}/d/topology.conf").stdout
