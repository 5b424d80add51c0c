"""Every line the CLI prints to the journal carries its priority; repeats are counted; --json errors are objects."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from cli_runner import invoke

from topocast.cli.journal import JournalStream, is_journal


def test_an_error_under_systemd_is_priority_3(tmp_path: Path) -> None:
    log = tmp_path / "journal"
    with log.open("w") as stderr:
        st = os.fstat(stderr.fileno())
        env = {**os.environ, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        code = subprocess.call(
            [sys.executable, "-m", "topocast.cli", "render", "--graph", str(tmp_path / "missing.json")],
            stderr=stderr, stdout=subprocess.DEVNULL, env=env,
        )  # fmt: skip
    lines = log.read_text().splitlines()
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith("<3>topocast: error: ") and "missing.json" in lines[0]


def test_without_the_journal_nothing_is_prefixed(tmp_path: Path) -> None:
    with (tmp_path / "plain").open("w") as stream:
        assert not is_journal(stream, {"JOURNAL_STREAM": "1:2"})
        st = os.fstat(stream.fileno())
        assert is_journal(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})


def test_priorities_and_a_repeated_warning_written_once_a_minute() -> None:
    now = [0.0]
    out = io.StringIO()
    j = JournalStream(out, clock=lambda: now[0])
    print("topocast: warning: pull --watch: notifications unavailable (x); retrying", file=j)
    for second in range(1, 16):
        now[0] = second
        print("topocast: warning: pull --watch: notifications unavailable (x); retrying", file=j)
    print("topocast: error: the end", file=j)
    print("<5>installed: already prefixed", file=j)
    print("a progress line", file=j)
    now[0] = 75.0
    print("topocast: warning: pull --watch: notifications unavailable (x); retrying", file=j)
    j.flush()
    assert out.getvalue().splitlines() == [
        "<4>topocast: warning: pull --watch: notifications unavailable (x); retrying",
        "<3>topocast: error: the end",
        "<5>installed: already prefixed",
        "<6>a progress line",
        "<4>topocast: warning: pull --watch: notifications unavailable (x); retrying (15 more in the last 75 s)",
    ]


def test_json_turns_an_error_into_one_object(tmp_path: Path) -> None:
    result = invoke(["pull", "--source", "bogus://x", "--dest", tmp_path / "t.conf", "--json"])
    assert result.exit_code == 2
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objects) == 1 and objects[0]["ok"] is False and objects[0]["exit_code"] == 2
