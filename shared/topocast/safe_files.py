"""File handling for an agent that runs as root in a directory others may reach.

The pull agent writes ``/etc/slurm/topology.conf`` as root. If anyone else can
write into that directory they can plant a symlink at the destination (or at
``topology.conf.prev``, or at the temp name) and have root overwrite
``/etc/passwd`` or ``slurm.conf`` with topology text. So, before anything is
written:

* the directory must be owned by the user the agent runs as (root in
  production) and not writable by group or others (:func:`check_directory`);
* the destination must not be a symlink and must resolve inside that directory
  (:func:`check_destination`);
* files are read with ``O_NOFOLLOW`` and a size cap (:func:`read_nofollow`) and
  written through ``mkstemp`` (``O_EXCL``) + ``rename``, which replaces a
  directory entry and never follows one.

:func:`dir_lock` serialises every install into one directory (``flock`` on the
directory itself, no lock file). It is re-entrant within one thread, so the
pull agent can hold it across "read installed generation -> install -> record
generation" while the installer takes it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from topocast.errors import TopocastError

__all__ = ["UnsafePathError", "check_destination", "check_directory", "dir_lock", "read_nofollow"]


class UnsafePathError(TopocastError):
    """A destination or its directory could let another user redirect or replace what root writes."""


def check_directory(directory: Path) -> None:
    """``directory`` must be a real directory owned by this process's user, not group/world-writable."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        raise UnsafePathError(f"directory {directory} does not exist; nothing written") from None
    if stat.S_ISLNK(st.st_mode):
        real = directory.resolve()
        st = os.stat(real)  # a symlinked /etc/slurm is common; what counts is who owns the real directory
        directory = real
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{directory} is not a directory; nothing written")
    uid = os.geteuid()
    if st.st_uid != uid:
        raise UnsafePathError(
            f"directory {directory} is owned by uid {st.st_uid}, not by uid {uid} that runs the agent; "
            "another user could plant a link there; nothing written"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(
            f"directory {directory} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
            "another user could plant a link there; nothing written"
        )


def check_destination(dest: Path) -> None:
    """``dest`` must not be a symlink (or anything but a regular file) and must stay inside its directory."""
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"{dest} is a symlink (to {os.readlink(dest)}); refusing to write through it")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{dest} is not a regular file; nothing written")
    if dest.resolve().parent != dest.parent.resolve():
        raise UnsafePathError(f"{dest} resolves outside its directory {dest.parent}; nothing written")
    check_directory(dest.parent)


def read_nofollow(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` (None when missing), opened with ``O_NOFOLLOW``; more than ``limit`` is an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafePathError(f"{path}: cannot open without following links ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise UnsafePathError(f"{path} is not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnsafePathError(f"{path}: larger than the {limit} byte limit")
    return data


_held = threading.local()


@contextlib.contextmanager
def dir_lock(directory: Path) -> Iterator[None]:
    """Exclusive ``flock`` on ``directory``; re-entrant within one thread, exclusive across threads and processes."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    key = os.fstat(fd)[stat.ST_DEV], os.fstat(fd)[stat.ST_INO]
    held: set[tuple[int, int]] = getattr(_held, "dirs", None) or set()
    _held.dirs = held
    if key in held:
        os.close(fd)
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
    finally:
        os.close(fd)  # closing drops the lock
