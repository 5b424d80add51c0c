"""SSM publisher + pull agent: tier limits, round trips, never-regress, tampering (moto server)."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path

import pytest
from pipeline_helpers import client, make_bucket

from topocast.agents.pull import PullError, fetch, pull
from topocast.aws.ssm_publish import SsmPublisher
from topocast.ports.records import Manifest, ManifestEntry
from topocast.publish import PublisherInputs, build_publishers
from topocast.publish.envelope import ADVANCED_LIMIT, STANDARD_LIMIT, Envelope, plan_value
from topocast.renderers import slurm_tree


def tree_conf(size: int) -> bytes:
    """A topology.conf-like file: one leaf per line, sequential names (compresses ~5x)."""
    lines, i = [], 0
    while sum(map(len, lines)) < size:
        lines.append(f"SwitchName=leaf-{i:05d} Nodes=gpu-[{i * 4:06d}-{i * 4 + 3:06d}]\n")
        i += 1
    return "".join(lines).encode()


def repetitive_conf(size: int) -> bytes:
    """Mostly identical lines (compresses ~50x)."""
    lines, i = [], 0
    while sum(map(len, lines)) < size:
        lines.append(f"SwitchName=spine-{i % 3} Switches=leaf-[0000-0127]\n" if i % 50 else f"# block {i}\n")
        i += 1
    return "".join(lines).encode()


def noisy_conf(size: int) -> bytes:
    """Random IDs: gzip cannot shrink it below 8 KB."""
    rng = random.Random(11)
    lines = []
    while sum(map(len, lines)) < size:
        lines.append(f"SwitchName=sw-{rng.getrandbits(64):016x} Nodes=gpu-{rng.getrandbits(64):016x}\n")
    return "".join(lines).encode()


def manifest_for(generation: int, content: bytes, file: str = slurm_tree.FILENAME) -> Manifest:
    entry = ManifestEntry("slurm-tree", file, hashlib.sha256(content).hexdigest(), 4, "text/plain", len(content))
    other = ManifestEntry("graph", "graph.json", hashlib.sha256(b"{}").hexdigest(), 4, "application/json", 2)
    return Manifest(generation, "g" * 64, (entry, other))


@pytest.fixture
def env(moto_server):
    ssm, s3 = client(moto_server, "ssm"), client(moto_server, "s3")
    bucket = make_bucket(moto_server)
    prefix = f"/topocast/{bucket}/slurm"
    return {"ssm": ssm, "s3": s3, "bucket": bucket, "prefix": prefix, "name": f"{prefix}/{slurm_tree.FILENAME}"}


def _publish(env, generation: int, content: bytes, **kw) -> object:
    pub = SsmPublisher(env["prefix"], env["ssm"], env["s3"], env["bucket"], **kw)
    return pub.publish(manifest_for(generation, content), {slurm_tree.FILENAME: content, "graph.json": b"{}"})


def _stored(env) -> tuple[dict, str, int]:
    value = env["ssm"].get_parameter(Name=env["name"])["Parameter"]["Value"]
    described = env["ssm"].describe_parameters(
        ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [env["name"]]}]
    )["Parameters"][0]
    return json.loads(value), described["Tier"], len(value.encode())


@pytest.mark.parametrize(
    ("content", "allow_advanced", "encoding", "tier"),
    [
        (tree_conf(3 * 1024), False, "raw", "Standard"),
        (repetitive_conf(30 * 1024), False, "gzip+base64", "Standard"),
        (tree_conf(30 * 1024), True, "gzip+base64", "Advanced"),
        (tree_conf(30 * 1024), False, "s3", "Standard"),  # would need Advanced, which is not allowed
        (noisy_conf(200 * 1024), True, "s3", "Standard"),
    ],
    ids=["3KB-raw", "30KB-gzip-standard", "30KB-gzip-advanced", "30KB-s3-no-advanced", "200KB-s3"],
)
def test_tiers_and_round_trip(env, content: bytes, allow_advanced: bool, encoding: str, tier: str) -> None:
    result = _publish(env, 7, content, allow_advanced=allow_advanced)
    assert result.published and result.written == [env["name"]]
    stored, stored_tier, size = _stored(env)
    assert (stored["encoding"], stored_tier) == (encoding, tier)
    assert size <= (STANDARD_LIMIT if tier == "Standard" else ADVANCED_LIMIT)  # what real SSM would enforce
    assert stored["generation"] == 7 and stored["sha256"] == hashlib.sha256(content).hexdigest()
    if encoding == "s3":
        assert stored["uri"].startswith(f"s3://{env['bucket']}/")
    pulled = fetch(f"ssm://{env['name']}", ssm=env["ssm"], s3=env["s3"])
    assert pulled.content == content and pulled.generation == 7 and pulled.encoding == encoding
    # the graph artifact is not a Slurm file: not published to SSM
    # filtered and paged: a page holds 10 parameters, and the session's moto holds other tests' ones too
    pages = (
        env["ssm"]
        .get_paginator("describe_parameters")
        .paginate(ParameterFilters=[{"Key": "Name", "Option": "BeginsWith", "Values": [env["prefix"]]}])
    )
    names = [p["Name"] for page in pages for p in page["Parameters"]]
    assert names == [env["name"]]


def test_never_regress_and_idempotent(env) -> None:
    new, old = tree_conf(1000), tree_conf(500)
    assert _publish(env, 5, new).published
    version = env["ssm"].get_parameter(Name=env["name"])["Parameter"]["Version"]
    stale = _publish(env, 4, old)
    assert not stale.published and "generation 5" in stale.detail and not stale.written
    again = _publish(env, 5, new)
    assert again.published and not again.written  # already current: nothing written
    assert env["ssm"].get_parameter(Name=env["name"])["Parameter"]["Version"] == version
    assert fetch(f"ssm://{env['name']}", ssm=env["ssm"]).content == new


def test_publisher_checks_the_bytes_against_the_manifest(env) -> None:
    pub = SsmPublisher(env["prefix"], env["ssm"], env["s3"], env["bucket"])
    with pytest.raises(Exception, match="does not match the manifest"):
        pub.publish(manifest_for(1, b"real"), {slurm_tree.FILENAME: b"other", "graph.json": b"{}"})


def test_tampered_values_are_rejected_by_fetch(env) -> None:
    content = tree_conf(1000)
    _publish(env, 3, content)
    value, _, _ = _stored(env)

    def put(v: dict) -> None:
        env["ssm"].put_parameter(Name=env["name"], Value=json.dumps(v), Type="String", Overwrite=True)

    put({**value, "data": value["data"].replace("leaf-00001", "leaf-66666")})
    with pytest.raises(PullError, match=f"SSM parameter {env['name']}.*does not match"):
        fetch(f"ssm://{env['name']}", ssm=env["ssm"])
    put({**value, "encoding": "gzip+base64", "data": "!!not base64!!"})
    with pytest.raises(PullError, match="does not decode"):
        fetch(f"ssm://{env['name']}", ssm=env["ssm"])
    env["ssm"].put_parameter(Name=env["name"], Value="SwitchName=x", Type="String", Overwrite=True)
    with pytest.raises(PullError, match="not a topocast envelope"):
        fetch(f"ssm://{env['name']}", ssm=env["ssm"])
    # an S3-pointer envelope whose object was replaced
    big = noisy_conf(20 * 1024)
    _publish(env, 4, big)
    pointer, _, _ = _stored(env)
    bucket, key = pointer["uri"][5:].split("/", 1)
    env["s3"].put_object(Bucket=bucket, Key=key, Body=big[:-1] + b"X")
    with pytest.raises(PullError, match=r"s3://.*does not match the envelope"):
        fetch(f"ssm://{env['name']}", ssm=env["ssm"], s3=env["s3"])


def test_fetch_sources(env, tmp_path: Path) -> None:
    f = tmp_path / "topology.conf"
    f.write_bytes(b"SwitchName=a Nodes=n1\n")
    got = fetch(f"file://{f}")
    assert got.content == f.read_bytes() and got.sha256 == hashlib.sha256(f.read_bytes()).hexdigest()
    env["s3"].put_object(Bucket=env["bucket"], Key="x/topology.conf", Body=b"abc", Metadata={"generation": "9"})
    assert fetch(f"s3://{env['bucket']}/x/topology.conf", s3=env["s3"]).generation == 9
    with pytest.raises(PullError, match="unsupported source"):
        fetch("http://example.com/topology.conf")
    with pytest.raises(PullError, match="three slashes"):
        fetch("ssm://topocast/c1/slurm/topology.conf", ssm=env["ssm"])
    with pytest.raises(PullError, match="cannot read"):
        fetch(f"file://{tmp_path}/missing.conf")


def test_pull_installs_once_and_never_goes_back(env, tmp_path: Path) -> None:
    dest, state = tmp_path / "topology.conf", tmp_path / "state.json"
    source = f"ssm://{env['name']}"
    first = tree_conf(900)
    _publish(env, 2, first)
    kw = {"reconfigure": False, "validate": False, "slurm_conf": None, "state_file": state, "ssm": env["ssm"]}
    out = pull(source, dest, **kw)
    assert (out.ok, out.action, out.generation) == (True, "installed", 2) and dest.read_bytes() == first
    assert pull(source, dest, **kw).action == "unchanged"
    # someone force-writes an older generation into the parameter: the head node keeps the newer file
    env["ssm"].delete_parameter(Name=env["name"])
    _publish(env, 1, tree_conf(400))
    assert pull(source, dest, **kw).action == "skipped" and dest.read_bytes() == first
    # tampering is caught before anything is written
    value = json.loads(env["ssm"].get_parameter(Name=env["name"])["Parameter"]["Value"])
    value.update(generation=3, data=value["data"] + "SwitchName=evil Nodes=x\n")
    env["ssm"].put_parameter(Name=env["name"], Value=json.dumps(value), Type="String", Overwrite=True)
    tampered = pull(source, dest, **kw)
    assert (tampered.action, tampered.exit_code) == ("refused", 3) and "refusing it" in tampered.detail
    assert dest.read_bytes() == first


# ----- pure envelope planning ---------------------------------------------------------------------


def _overhead() -> int:
    """Bytes the envelope adds around the data for the test's fixed fields."""
    return len(Envelope(1, "0" * 64, 0, "t.conf", "slurm-tree", "raw", data="").dumps().encode())


def test_plan_boundaries() -> None:
    room = STANDARD_LIMIT - _overhead()

    def plan(text: bytes, **kw) -> Envelope:
        return plan_value(text, generation=1, file="t.conf", fmt="slurm-tree", s3_uri="s3://b/k", **kw)

    # the overhead was measured with "size": 0; the real size has 4 digits, 3 more bytes
    exact = bytes(random.Random(1).choice(b"abcdefghij") for _ in range(room - 3))
    assert len(str(len(exact))) == 4
    assert plan(exact).encoding == "raw"
    over = exact + b"z"
    assert plan(over).encoding == "gzip+base64"  # one byte over: compressed instead
    # a parameter already in the Advanced tier stays there (SSM cannot go back to Standard)
    assert plan(b"tiny", min_tier="Advanced").tier == "Advanced"
    binary = gzip.compress(b"x" * 100)  # not UTF-8: never raw
    assert plan(binary).encoding == "gzip+base64"


def test_the_aws_root_registers_the_ssm_publisher(env) -> None:
    import topocast.aws.root  # noqa: F401  (the composition root registers its cloud's publishers)
    from topocast.config import Settings

    settings = Settings(cluster="c1", bucket=env["bucket"], publishers=["ssm"])
    clients = {"ssm": env["ssm"], "s3": env["s3"]}
    (ssm,) = build_publishers(settings.publishers, PublisherInputs(settings, lambda g: None, clients.__getitem__))
    assert isinstance(ssm, SsmPublisher) and ssm.prefix == "/topocast/c1/slurm"
    with pytest.raises(Exception, match=r"unknown publisher 'nope'; known: .*kubernetes, slurmrestd, ssm"):
        build_publishers(["nope"], PublisherInputs(settings, lambda g: None))


def test_parameters_are_named_after_each_artifact_so_tree_and_block_both_publish(env) -> None:
    conf, block, yaml = b"SwitchName=a Nodes=n1\n", b"BlockName=b1 Nodes=n1\n", b"- topology: default\n"
    entries = (
        ManifestEntry("slurm-tree", "topology-tree.conf", hashlib.sha256(conf).hexdigest(), 1),
        ManifestEntry("slurm-block", "topology-block.conf", hashlib.sha256(block).hexdigest(), 1),
        ManifestEntry("slurm-yaml", "topology.yaml", hashlib.sha256(yaml).hexdigest(), 1),
    )
    pub = SsmPublisher(env["prefix"], env["ssm"], env["s3"], env["bucket"])
    files = {"topology-tree.conf": conf, "topology-block.conf": block, "topology.yaml": yaml}
    result = pub.publish(Manifest(1, "g" * 64, entries), files)
    assert sorted(result.written) == [f"{env['prefix']}/{f}" for f in sorted(files)]
    for name, content in files.items():
        assert fetch(f"ssm://{env['prefix']}/{name}", ssm=env["ssm"]).content == content
