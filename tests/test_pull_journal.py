"""``topocast pull`` as systemd runs it: stdout/stderr are pipes, journald reads ``<N>`` priority prefixes.

Every test runs the real CLI (tests/cli_runner.py: the output streams are not terminals, as under
systemd) and checks what an operator reading the journal would see: the priority, the stream, the
exit status, the path once, bounded lines, the ``--json`` object, and no temp file left behind.
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
from pathlib import Path

import pytest
from cli_runner import Result, invoke

TREE4 = "SwitchName=s1 Nodes=n[1-4]\n"


def conf(n: int) -> str:
    return f"SwitchName=s1 Nodes=n[1-{n}]\n"


def etc(tmp_path: Path) -> Path:
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    return d


def pull(src: Path, dest: Path, *extra: object, env: dict[str, str] | None = None) -> Result:
    return invoke(["pull", "--source", f"file://{src}", "--dest", dest, "--no-validate", *extra], env=env)


def lines(text: str) -> list[str]:
    return text.splitlines()


def test_installed_is_a_notice_and_unchanged_is_silent_unless_verbose(tmp_path: Path) -> None:
    src, dest = tmp_path / "t.conf", etc(tmp_path) / "topology.conf"
    src.write_text(TREE4)
    first = pull(src, dest)
    assert (first.exit_code, first.stderr) == (0, ""), first.output
    (line,) = lines(first.stdout)
    assert line.startswith(f"<5>{dest}: installed (sha256 "), line
    assert line.count(str(dest)) == 1, "the path once"
    assert "generation None" not in line and "generation" not in line, "a file:// source has no generation"
    assert line.endswith("; nodes: 4 added (n[1-4]), 0 removed, 0 moved")

    again = pull(src, dest)
    assert (again.exit_code, again.stdout, again.stderr) == (0, "", ""), "the 60 s timer writes nothing"
    verbose = pull(src, dest, "--verbose")
    assert verbose.exit_code == 0 and lines(verbose.stdout) == [
        f"<7>{dest}: unchanged: already up to date (sha256 {lines(first.stdout)[0].split('sha256 ')[1][:12]}); "
        "nothing to do"
    ]


def test_a_junk_file_is_refused_with_the_parse_error_even_with_allow_node_loss(tmp_path: Path) -> None:
    src, dest = tmp_path / "junk.conf", etc(tmp_path) / "topology.conf"
    dest.write_text(TREE4)
    src.write_text("this is not a topology\n")
    result = pull(src, dest, "--allow-node-loss")
    assert result.exit_code == 3 and result.stdout == "", result.output
    (line,) = lines(result.stderr)
    assert line.startswith(f"<3>{dest}: refused: "), line
    # validate-slurm's own reason for this file, not a node-loss hold
    assert f"{src}:1: cannot read 'this': expected Key=Value (slurmctld fails on this)" in line
    assert "(+2 more); nothing written" in line and "allow-node-loss" not in line
    assert dest.read_text() == TREE4


def test_a_node_loss_hold_is_a_warning_with_its_own_exit_code_and_allow_installs_it(tmp_path: Path) -> None:
    src, dest = tmp_path / "t.conf", etc(tmp_path) / "topology.conf"
    dest.write_text(conf(100))
    src.write_text(conf(80))
    held = pull(src, dest)
    assert held.exit_code == 4 and held.stdout == ""
    (line,) = lines(held.stderr)
    assert line.startswith(f"<4>{dest}: held: the new file drops 20 of the 100 installed nodes (20%"), line
    assert dest.read_text() == conf(100)
    allowed = pull(src, dest, "--allow-node-loss")
    assert allowed.exit_code == 0 and allowed.stdout.startswith(f"<5>{dest}: installed")
    assert dest.read_text() == conf(80)


def test_json_is_one_object_per_run_with_counts_and_a_sample(tmp_path: Path) -> None:
    src, dest = tmp_path / "t.conf", etc(tmp_path) / "topology.conf"
    src.write_text("SwitchName=s1 Nodes=n[1-40]\n")
    result = pull(src, dest, "--json")
    assert result.exit_code == 0 and result.stderr == ""
    (line,) = lines(result.stdout)
    data = json.loads(line)
    assert {k: data[k] for k in ("action", "status", "ok", "exit_code", "priority", "dest", "generation")} == {
        "action": "installed",
        "status": "installed",
        "ok": True,
        "exit_code": 0,
        "priority": 5,
        "dest": str(dest),
        "generation": None,
    }
    assert data["changes"] == {
        "added": 40,
        "removed": 0,
        "moved": 0,
        "sample": {"added": ["n1", "n10", "n11"], "removed": [], "moved": {}},
    }
    assert data["state_saved"] is True and data["validated_by"] is None and data["failed_step"] is None

    quiet = pull(src, dest, "--json")  # unchanged still gets its one line in --json
    assert json.loads(quiet.stdout)["action"] == "unchanged" and len(lines(quiet.stdout)) == 1
    src.write_text("junk\n")
    refused = json.loads(pull(src, dest, "--json").stdout)
    assert (refused["action"], refused["exit_code"], refused["failed_step"]) == ("refused", 3, "validate")


def test_a_source_that_cannot_be_read_is_exit_2_in_one_line(tmp_path: Path) -> None:
    dest = etc(tmp_path) / "topology.conf"
    result = pull(tmp_path / "missing.conf", dest)
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = lines(result.stderr)
    assert line.startswith(f"<3>{dest}: cannot read the source: file://{tmp_path}/missing.conf: cannot read")
    data = json.loads(pull(tmp_path / "missing.conf", dest, "--json").stdout)
    assert (data["action"], data["exit_code"]) == ("error", 2)


def test_a_20000_node_first_install_prints_short_lines(tmp_path: Path) -> None:
    """Hostnames that no hostlist compresses: the line names a sample of three, not 20,000 names (was 302 KB)."""
    rng = random.Random(7)
    names = [f"ip-10-{i // 65536}-{i // 256 % 256}-{i % 256}-{rng.randrange(10**6):06d}" for i in range(20_000)]
    rng.shuffle(names)
    leaves = [names[i : i + 18] for i in range(0, len(names), 18)]
    text = "SwitchName=root Switches=" + ",".join(f"leaf{i}" for i in range(len(leaves))) + "\n"
    text += "".join(f"SwitchName=leaf{i} Nodes={','.join(leaf)}\n" for i, leaf in enumerate(leaves))
    src, dest = tmp_path / "t.conf", etc(tmp_path) / "topology.conf"
    src.write_text(text)
    result = pull(src, dest)
    assert result.exit_code == 0, result.output[:2000]
    (line,) = lines(result.stdout)
    assert len(line.encode()) < 400, len(line)  # journald splits at 48 KB
    first_three = ", ".join(sorted(names)[:3])
    assert line.endswith(f"; nodes: 20000 added ({first_three}, ...), 0 removed, 0 moved"), line


def test_installed_but_state_not_saved_has_its_own_exit_code_and_leaves_no_temp_file(tmp_path: Path) -> None:
    src, dest = tmp_path / "t.conf", etc(tmp_path) / "topology.conf"
    src.write_text(TREE4)
    state_dir = tmp_path / "state"
    (state_dir / "pull-state.json").mkdir(parents=True)  # a rename over it fails (EISDIR), like a full disk
    result = pull(src, dest, "--state-file", state_dir / "pull-state.json")
    assert result.exit_code == 6 and result.stdout == ""
    (line,) = lines(result.stderr)
    assert line.startswith(f"<3>{dest}: installed (sha256 "), line
    assert f"; state not saved: Is a directory ({state_dir}/pull-state.json)" in line
    assert dest.read_text() == TREE4, "the file itself was installed"
    assert os.listdir(state_dir) == ["pull-state.json"], "no .pull-state.json.XXXX temp file"
    assert sorted(os.listdir(dest.parent)) == ["topology.conf"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tiny tmpfs needs root")
def test_a_full_state_filesystem_says_installed_and_no_space(tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(full)], check=False).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT)
        with pytest.raises(OSError, match="No space left"):
            os.write(fd, b"\0" * 8192)
            os.write(fd, b"\0" * 8192)
        os.close(fd)
        src, dest = tmp_path / "t.conf", etc(tmp_path) / "topology.conf"
        src.write_text(TREE4)
        for _ in range(2):  # every run, not only the first, leaves the directory as it found it
            result = pull(src, dest, "--state-file", full / "pull-state.json")
            assert result.exit_code == 6, result.output
            assert f"state not saved: No space left on device ({full}/pull-state.json)" in result.stderr
            assert os.listdir(full) == ["filler"], "no .pull-state.json.XXXX temp file"
            dest.write_text(TREE4 + "# older\n")  # so the next run installs again
    finally:
        subprocess.run(["umount", str(full)], check=False)


def fake_scontrol(tmp_path: Path) -> dict[str, str]:
    """A PATH with an scontrol whose first reconfigure hangs 3.6 s and fails (a controller that is down)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        f"  reconfigure) if [ ! -e {tmp_path}/tried ]; then touch {tmp_path}/tried; sleep 3.6;\n"
        "    echo 'slurm_reconfigure error: Unable to contact slurm controller (connect failure)' >&2; exit 1; fi;"
        " exit 0;;\n"
        "  ping) echo 'Slurmctld(primary) at head is UP'; exit 0;;\n"
        "esac\nexit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_slow_step_prints_progress_and_a_rollback_has_its_own_exit_code(tmp_path: Path) -> None:
    src, dest = tmp_path / "t.conf", etc(tmp_path) / "topology.conf"
    dest.write_text(TREE4)
    src.write_text(conf(4) + "SwitchName=s2 Nodes=n[5-6]\n")
    result = pull(src, dest, "--reconfigure", env=fake_scontrol(tmp_path))
    assert result.exit_code == 5 and result.stdout == "", result.output
    progress, line = lines(result.stderr)
    assert progress == f"<6>{dest}: still scontrol reconfigure (3 s)", progress
    assert line.startswith(f"<3>{dest}: rolled_back: step reconfigure failed: scontrol reconfigure failed: ")
    assert line.endswith("restored the previous file, reconfigured again, controller is UP")
    assert dest.read_text() == TREE4
