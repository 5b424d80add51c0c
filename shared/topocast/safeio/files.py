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

Every other file root may write (``render --out DIR``, ``discover --out``, ``schema --out``,
``demo --out``, the pull agent's state file) goes through :func:`write_file` /
:func:`out_directory`: every directory on the way must belong to root or to this user and be
writable by nobody else unless sticky (:func:`check_path`), and the file is created under a
random name relative to a directory descriptor (``O_EXCL | O_NOFOLLOW``) and renamed into place
(:func:`write_file`), so a link another user planted is replaced, never followed, and a failed
write leaves no temp file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from topocast.errors import TopocastError

__all__ = [
    "UnsafePathError",
    "check_destination",
    "check_directory",
    "check_path",
    "dir_lock",
    "out_directory",
    "read_credential",
    "read_nofollow",
    "write_file",
    "write_out",
]


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


def _unsafe_entry(path: Path, st: os.stat_result, uid: int) -> str | None:
    """Why another user could replace what is at ``path`` (None: only root or ``uid`` can)."""
    if st.st_uid not in (0, uid):
        kind = "link" if stat.S_ISLNK(st.st_mode) else "directory"
        return f"{kind} {path} is owned by uid {st.st_uid}, neither root nor uid {uid} that runs topocast"
    if stat.S_ISDIR(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        mode = stat.S_IMODE(st.st_mode)
        return f"directory {path} is writable by group or others (mode {mode:o}) without the sticky bit"
    return None


def check_path(directory: Path, *, then: str = "nothing written") -> Path:
    """Every component of ``directory`` (as spelled and as resolved), from ``/`` down, is safe; returns its realpath.

    Safe: owned by root or by this process's user, and (a directory) not writable by group or
    others unless sticky (``/tmp``). A symlinked component counts by its owner, and the directory
    it points at is checked the same way. A component that does not exist yet ends the check (it
    will be created by this user). Raises :class:`UnsafePathError` naming the first unsafe one.
    """
    uid = os.geteuid()
    spelled = Path(os.path.abspath(directory))
    real = Path(os.path.realpath(spelled))
    for chain in (spelled, real) if real != spelled else (spelled,):
        for part in (*reversed(chain.parents), chain):
            try:
                st = os.lstat(part)
            except (FileNotFoundError, NotADirectoryError):
                break  # created by this user later, or the write fails with its own reason
            why = _unsafe_entry(part, st, uid)
            if why:
                raise UnsafePathError(f"{why}; another user could plant a link there; {then}")
    return real


def out_directory(directory: Path) -> Path:
    """``--out DIR`` for files root may write: the path is checked (:func:`check_path`), missing
    directories are created (mode 0755; ``OSError`` when that fails), and it must be a directory; returns it."""
    check_path(directory)
    directory.mkdir(parents=True, exist_ok=True, mode=0o755)  # an OSError is the caller's "cannot write" line
    check_path(directory)  # what was created is ours; re-checked so a race in between is caught
    if not directory.is_dir():
        raise UnsafePathError(f"{directory} is not a directory; nothing written")
    return directory


def write_file(
    path: Path, data: bytes | str | Iterable[bytes], *, mode: int = 0o644, owner: tuple[int, int] | None = None
) -> str:
    """Write ``data`` to ``path`` atomically, never through a link; returns the sha256 of what was written.

    The directory is checked (:func:`check_path`) and opened once; the temp file is created in it
    relative to that descriptor (``O_CREAT | O_EXCL | O_NOFOLLOW``, a random name), written,
    fsynced, given ``mode`` (and ``owner`` when root) and renamed over ``path``, which replaces a
    planted link instead of following it. On any failure the temp file is removed and the
    ``OSError`` raised (``filename`` is ``path``).
    """
    path = Path(path)
    check_path(path.parent)
    chunks: Iterable[bytes] = [data.encode()] if isinstance(data, str) else [data] if isinstance(data, bytes) else data
    digest = hashlib.sha256()
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        tmp, fd = _create_temp(path.name, dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                for chunk in chunks:
                    digest.update(chunk)
                    fh.write(chunk)
                fh.flush()
                os.fchmod(fh.fileno(), mode)
                if owner is not None and os.geteuid() == 0:
                    os.fchown(fh.fileno(), *owner)
                os.fsync(fh.fileno())
            os.rename(tmp, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            if isinstance(exc, OSError) and exc.filename is None:
                exc.filename = str(path)
            raise
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
    return digest.hexdigest()


def write_out(path: Path, text: str | bytes, flag: str = "--out") -> None:
    """``--out FILE`` of a command root may run: :func:`write_file` into an existing directory, one-line errors."""
    try:
        write_file(path, text)
    except OSError as exc:
        raise TopocastError(f"{flag} {path}: cannot write ({exc.strerror or exc}); nothing written") from None
    except UnsafePathError as exc:
        raise UnsafePathError(f"{flag} {path}: {exc}") from None


def _create_temp(name: str, dir_fd: int) -> tuple[str, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = f".{name}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp name for {name}")


def check_destination(dest: Path) -> None:
    """``dest`` must not be a symlink (or anything but a regular file) and must stay inside its directory;
    its directory must be the agent's own (:func:`check_directory`) and every directory above it safe
    (:func:`check_path`)."""
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
    check_path(dest.parent)


def read_nofollow(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` (None when missing), opened with ``O_NOFOLLOW``; more than ``limit`` is an error."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UnsafePathError(f"{path}: cannot open without following links ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(f"{path} is not a regular file")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnsafePathError(f"{path}: larger than the {limit} byte limit")
    return data


def read_credential(path: Path, limit: int, what: str, *, private: bool = True, root_links: bool = False) -> bytes:
    """A file holding a credential, read the way the agent reads what it installs (docs/security.md).

    Refused, with :class:`UnsafePathError` naming ``what`` and why: a link (``O_NOFOLLOW``; whatever
    it points at, even a root-only file, is never read), anything but a regular file, a file owned
    by anyone but root or this process's user, one writable by group or others, with ``private``
    one group or others may read at all, one larger than ``limit``, and a file in a directory another
    user could write into (every directory up from ``/``, :func:`check_path`). ``OSError`` (missing,
    permission) is the caller's "cannot read" line.

    ``root_links``: a link only root or this user could have made (owned by one of them, in
    directories nobody else can write, as every link after it) is followed, so a Kubernetes Secret
    volume (``creds.json -> ..data/creds.json``, all root's) can be read; any other link is refused.
    """
    path = Path(os.path.abspath(path))
    check_path(path.parent, then=f"{what} not read")
    if root_links:
        path = _follow_own_links(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"{what} {path} is a symbolic link; credentials are not read through links") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        uid = os.geteuid()
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{what} {path} is not a regular file; not read")
        if st.st_uid not in (0, uid):
            raise UnsafePathError(
                f"{what} {path} is owned by uid {st.st_uid}, neither root nor uid {uid} that runs topocast; not read"
            )
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UnsafePathError(f"{what} {path} is writable by group or others (mode {mode:04o}); not read")
        if private and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UnsafePathError(f"{what} {path} is readable by other users (mode {mode:04o}); chmod 600 it")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UnsafePathError(f"{what} {path}: larger than the {limit} byte limit")
    return data


def _follow_own_links(path: Path, what: str) -> Path:
    """Where ``path`` leads through links owned by root or this user in safe directories (see read_credential)."""
    uid = os.geteuid()
    for _ in range(40):  # the kernel's own limit on links in a row
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return path  # the open says it is missing
        if not stat.S_ISLNK(st.st_mode):
            return path
        if st.st_uid not in (0, uid):
            raise UnsafePathError(
                f"{what} {path} is a link owned by uid {st.st_uid}, neither root nor uid {uid} that runs topocast; "
                "not followed"
            )
        path = Path(os.path.normpath(path.parent / os.readlink(path)))
        check_path(path.parent, then=f"{what} not read")
    raise UnsafePathError(f"{what} {path}: too many links; not read")


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
