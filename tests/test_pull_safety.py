"""The root pull agent against hostile destinations, sources and races."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from topocast.agents.pull import PullError, fetch, pull
from topocast.publish import envelope
from topocast.safeio.files import dir_lock

FOUR = b"SwitchName=s1 Nodes=n[1-4]\n"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


class FakeSsm:
    """get_parameter only, answering one envelope per parameter name."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get_parameter(self, Name: str, WithDecryption: bool = False) -> dict[str, Any]:
        return {"Parameter": {"Name": Name, "Value": self.values[Name]}}


class PerThreadSsm:
    """One parameter whose value depends on the reading thread's name (replicas that lag)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get_parameter(self, Name: str, WithDecryption: bool = False) -> dict[str, Any]:
        return {"Parameter": {"Name": Name, "Value": self.values[threading.current_thread().name]}}


class FakeBody(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.read_sizes: list[int | None] = []

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        self.read_sizes.append(size)
        return super().read(size)


class FakeS3:
    def __init__(self, objects: dict[tuple[str, str], bytes], content_length: int | None = None) -> None:
        self.objects, self.content_length, self.bodies = objects, content_length, []

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:
        data = self.objects[(Bucket, Key)]
        body = FakeBody(data)
        self.bodies.append(body)
        return {"Body": body, "ContentLength": self.content_length or len(data), "Metadata": {}}


def conf(n: int) -> bytes:
    return f"SwitchName=s1 Nodes=n[1-{n}]\n".encode()


def raw_envelope(content: bytes, generation: int, **overrides: Any) -> str:
    env = envelope.plan_value(content, generation=generation, file="topology.conf", fmt="slurm-tree", s3_uri="-")
    fields = {**env.__dict__, **overrides}
    return envelope.Envelope(**fields).dumps()


def pointer(content: bytes, generation: int, uri: str, size: int | None = None) -> str:
    return envelope.Envelope(
        generation=generation,
        sha256=hashlib.sha256(content).hexdigest(),
        size=len(content) if size is None else size,
        file="topology.conf",
        format="slurm-tree",
        encoding="s3",
        uri=uri,
    ).dumps()


def do_pull(source: str, dest: Path, **kw: Any):
    return pull(source, dest, reconfigure=False, validate=False, slurm_conf=None, **kw)


# ----- destination -------------------------------------------------------------------------------
def test_symlinked_destination_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "passwd"
    victim.write_bytes(b"root:x:0:0::/root:/bin/sh\n")
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    (etc / "topology.conf").symlink_to(victim)
    src = tmp_path / "new.conf"
    src.write_bytes(FOUR)
    out = do_pull(f"file://{src}", etc / "topology.conf")
    assert (out.ok, out.action) == (False, "refused") and "is a symlink" in out.detail
    assert victim.read_bytes() == b"root:x:0:0::/root:/bin/sh\n"
    assert sorted(p.name for p in etc.iterdir()) == ["topology.conf"], "no .prev, no temp file"


@needs_root
def test_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    os.chown(etc, 65534, 65534)
    src = tmp_path / "new.conf"
    src.write_bytes(FOUR)
    out = do_pull(f"file://{src}", etc / "topology.conf")
    assert out.action == "refused" and f"directory {etc} is owned by uid 65534" in out.detail
    assert list(etc.iterdir()) == []


def test_group_writable_directory_is_refused(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    etc.chmod(0o775)
    src = tmp_path / "new.conf"
    src.write_bytes(FOUR)
    out = do_pull(f"file://{src}", etc / "topology.conf")
    assert out.action == "refused" and f"directory {etc} is writable by group or others (mode 775)" in out.detail
    assert list(etc.iterdir()) == []


# ----- races -------------------------------------------------------------------------------------
@pytest.mark.parametrize("attempt", range(4))
def test_concurrent_pulls_of_generation_2_and_1_end_at_2(tmp_path: Path, attempt: int) -> None:
    # one parameter, read twice: the first reader sees generation 2, a lagging replica answers the other with 1
    values = {"new": raw_envelope(conf(4), 2), "old": raw_envelope(conf(4) + b"# old\n", 1)}
    ssm = PerThreadSsm(values)
    etc, state = tmp_path / "etc", tmp_path / "state.json"
    etc.mkdir(mode=0o755)
    dest = etc / "topology.conf"
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        results[name] = do_pull("ssm:///c/p", dest, state_file=state, ssm=ssm)

    order = ("old", "new") if attempt % 2 else ("new", "old")
    threads = [threading.Thread(target=run, args=(n,), name=n) for n in order]
    with dir_lock(etc):  # both pulls fetch, then queue on the lock: the check must happen under it
        for t in threads:
            t.start()
        for t in threads:
            t.join(0.3)
    for t in threads:
        t.join(10)
    assert dest.read_bytes() == conf(4), {k: (v.action, v.detail) for k, v in results.items()}
    assert results["new"].action == "installed"
    assert results["old"].action in ("skipped", "installed")


# ----- what is read ------------------------------------------------------------------------------
def test_pointer_to_another_bucket_or_key_is_refused() -> None:
    content = conf(4)
    good = "s3://pub/topocast/c/000000000007/topology.conf"
    s3 = FakeS3({("pub", good.split("/", 3)[3]): content, ("other", "secrets/000000000007/topology.conf"): content})
    kw = {"s3": s3, "pointer_bucket": "pub", "pointer_prefix": "topocast/c"}
    assert fetch("ssm:///p", ssm=FakeSsm({"/p": pointer(content, 7, good)}), **kw).content == content
    cases = {
        "s3://other/secrets/000000000007/topology.conf": "bucket 'other' is not the configured 'pub'",
        "s3://pub/elsewhere/000000000007/topology.conf": "not under the configured prefix 'topocast/c'/",
        "s3://pub/topocast/c/000000000006/topology.conf": "does not name generation 7",
        "s3://pub/topocast/c/../x/000000000007/topology.conf": "not a plain path",
    }
    for uri, message in cases.items():
        with pytest.raises(PullError, match=message.replace("(", r"\(").replace(".", r"\.")):
            fetch("ssm:///p", ssm=FakeSsm({"/p": pointer(content, 7, uri)}), **kw)


def test_oversized_pointer_object_is_refused_by_content_length_before_reading() -> None:
    content = conf(4)
    uri = "s3://pub/t/000000000003/topology.conf"
    s3 = FakeS3({("pub", "t/000000000003/topology.conf"): content}, content_length=600 * 1024 * 1024)
    with pytest.raises(PullError, match="629145600 bytes exceeds the 27 byte limit"):
        fetch("ssm:///p", ssm=FakeSsm({"/p": pointer(content, 3, uri)}), s3=s3)
    assert s3.bodies[0].read_sizes == [], "the body was never read"


def test_envelope_size_is_checked() -> None:
    content = conf(4)
    uri = "s3://pub/t/000000000003/topology.conf"
    s3 = FakeS3({("pub", "t/000000000003/topology.conf"): content + b"# trailing\n"})
    with pytest.raises(PullError, match="38 bytes exceeds the 27 byte limit"):
        fetch("ssm:///p", ssm=FakeSsm({"/p": pointer(content, 3, uri)}), s3=s3)
    assert s3.bodies[0].read_sizes == [], "ContentLength said too much: never read"
    s3.content_length = 27  # a store that lies about the length is still read only up to the size + 1
    with pytest.raises(PullError, match="larger than the 27 byte limit"):
        fetch("ssm:///p", ssm=FakeSsm({"/p": pointer(content, 3, uri)}), s3=s3)
    assert s3.bodies[1].read_sizes == [27 + 1]
    with pytest.raises(PullError, match="size 999999999999 is outside"):
        fetch("ssm:///p", ssm=FakeSsm({"/p": pointer(content, 3, uri, size=999_999_999_999)}), s3=s3)


def test_gzip_bomb_in_an_envelope_is_not_inflated() -> None:
    bomb = base64.b64encode(gzip.compress(b"\0" * (16 * 1024 * 1024))).decode()
    value = raw_envelope(FOUR, 5, encoding="gzip+base64", data=bomb)
    with pytest.raises(PullError, match="content is more than 27 bytes, the envelope says 27"):
        fetch("ssm:///p", ssm=FakeSsm({"/p": value}))


# ----- node loss ---------------------------------------------------------------------------------
def test_large_node_loss_is_held_unless_allowed(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    dest = etc / "topology.conf"
    dest.write_bytes(conf(100))
    src = tmp_path / "new.conf"
    src.write_bytes(conf(80))
    out = do_pull(f"file://{src}", dest)
    assert (out.ok, out.action) == (False, "held")
    assert "drops 20 of the 100 installed nodes (20%, over the 10% limit" in out.detail
    assert dest.read_bytes() == conf(100)
    src.write_bytes(conf(95))
    assert do_pull(f"file://{src}", dest).action == "installed", "5% is within the limit"
    src.write_bytes(conf(10))
    out = do_pull(f"file://{src}", dest, allow_node_loss=True)
    assert out.action == "installed" and dest.read_bytes() == conf(10)
