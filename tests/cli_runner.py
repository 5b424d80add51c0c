"""Run the ``topocast`` CLI in process and capture what a user would see (exit code, stdout, stderr)."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from unittest import mock

from topocast.cli import run


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def invoke(args: Sequence[str], env: Mapping[str, str] | None = None) -> Result:
    """``topocast ARGS`` in this process, with ``env`` added to the environment."""
    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, dict(env or {})), redirect_stdout(out), redirect_stderr(err):
        code = run([str(a) for a in args])
    return Result(code, out.getvalue(), err.getvalue())
