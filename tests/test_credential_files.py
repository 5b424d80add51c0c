"""Credential files are read like the files the agent installs (docs/security.md).

The hostile cases of issue 29 are planted by another uid (4242) the way an attacker with that
account would: a link to a root-only file, a token file they own, a directory they own or can
write. The slurmrestd token is checked through the CLI (`topocast pull --via slurmrestd`) against a
server on 127.0.0.1 that must never be asked; kubeconfig and NetQ credentials through their loaders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from http_fixtures import serve

from topocast.errors import ProviderError
from topocast.k8s.client import K8sConnection, KubernetesConfigError, build_client
from topocast.providers.onprem.netq import load_credentials
from topocast.slurm.rest_token import TokenError, read_token

ATTACKER = 4242
ROOT_ONLY = "root-only-content-s3cret"
TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJzbHVybSJ9.c2lnbmF0dXJl"
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants files owned by another uid (needs root)")


def root_only(tmp_path: Path) -> Path:
    secret = tmp_path / "shadow"
    secret.write_text(ROOT_ONLY + "\n")
    secret.chmod(0o600)
    return secret


def attacker_dir(tmp_path: Path) -> Path:
    """A directory uid 4242 owns (their home, say)."""
    home = tmp_path / "home4242"
    home.mkdir(mode=0o755)
    os.chown(home, ATTACKER, ATTACKER)
    return home


def pull(token_from: str, server: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "topology.conf"
    src.write_text("SwitchName=s1 Nodes=n1\n")
    dest = tmp_path / "etc" / "topology.conf"
    dest.parent.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "topocast.cli", "pull", "--source", f"file://{src}", "--dest", str(dest),
         "--via", "slurmrestd", server, "--token-from", token_from],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def refused_by_the_cli(token_from: Path | str, tmp_path: Path, why: str) -> None:
    with serve(lambda h: h.send_response(500)) as (url, seen):
        done = pull(str(token_from), url, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("topocast: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert why in done.stderr, done.stderr
    assert seen == [], "nothing may be sent with a token read from an unsafe file"
    assert ROOT_ONLY not in done.stdout + done.stderr and TOKEN not in done.stdout + done.stderr


@as_root
def test_a_link_another_user_planted_to_a_root_only_file_is_not_followed(tmp_path: Path) -> None:
    link = attacker_dir(tmp_path) / "jwt"
    link.symlink_to(root_only(tmp_path))
    os.lchown(link, ATTACKER, ATTACKER)
    refused_by_the_cli(link, tmp_path, f"directory {link.parent} is owned by uid {ATTACKER}")


def test_a_link_even_in_roots_own_directory_is_not_followed(tmp_path: Path) -> None:
    link = tmp_path / "jwt"
    link.symlink_to(root_only(tmp_path))
    refused_by_the_cli(link, tmp_path, f"token file {link} is a symbolic link")
    with pytest.raises(TokenError, match="is a symbolic link"):
        read_token(f"file://{link}")


@as_root
def test_a_private_token_file_another_user_owns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text(TOKEN)
    path.chmod(0o600)
    os.chown(path, ATTACKER, ATTACKER)
    refused_by_the_cli(path, tmp_path, f"is owned by uid {ATTACKER}, neither root nor uid 0")


@as_root
def test_a_token_file_in_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    path = attacker_dir(tmp_path) / "jwt"
    path.write_text(TOKEN)
    path.chmod(0o600)  # root's own file, but uid 4242 can replace it
    refused_by_the_cli(path, tmp_path, f"directory {path.parent} is owned by uid {ATTACKER}")


def test_a_token_file_in_a_directory_anyone_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone may rename the file away and put theirs
    path = shared / "jwt"
    path.write_text(TOKEN)
    path.chmod(0o600)
    refused_by_the_cli(path, tmp_path, f"directory {shared} is writable by group or others (mode 777)")


def test_a_token_file_others_may_write_or_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text(TOKEN)
    path.chmod(0o622)
    refused_by_the_cli(path, tmp_path, "is writable by group or others (mode 0622)")
    path.chmod(0o640)
    with pytest.raises(TokenError, match=r"is readable by other users \(mode 0640\); chmod 600 it"):
        read_token(str(path))


def test_a_fifo_or_device_is_not_a_token_file(tmp_path: Path) -> None:
    fifo = tmp_path / "jwt"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(TokenError, match="is not a regular file"):
        read_token(str(fifo))  # returns at once: opened O_NONBLOCK, never read


def test_a_safe_token_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "jwt"
    path.write_text(f"SLURM_JWT={TOKEN}\n")
    path.chmod(0o600)
    assert read_token(str(path)).value == TOKEN


# ----- kubeconfig (names the server the token goes to, and the commands `exec` runs) ----------------


def kubeconfig(path: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1", "kind": "Config", "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": "http://127.0.0.1:9"}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "kube-s3cret"}}],
            }
        )
    )  # fmt: skip
    return path


def load_kubeconfig(path: Path) -> str:
    with pytest.raises(KubernetesConfigError) as info:
        build_client(K8sConnection(auth="kubeconfig", kubeconfig=str(path)))
    assert "\n" not in str(info.value) and "kube-s3cret" not in str(info.value)
    return str(info.value)


@as_root
def test_a_kubeconfig_another_user_owns_or_links_is_refused(tmp_path: Path) -> None:
    owned = kubeconfig(tmp_path / "owned")
    os.chown(owned, ATTACKER, ATTACKER)
    assert f"kubeconfig {owned} is owned by uid {ATTACKER}" in load_kubeconfig(owned)
    link = tmp_path / "link"
    link.symlink_to(kubeconfig(tmp_path / "real"))
    os.lchown(link, ATTACKER, ATTACKER)
    assert f"kubeconfig {link} is a link owned by uid {ATTACKER}" in load_kubeconfig(link)
    planted = attacker_dir(tmp_path) / "config"  # root's own file, in a directory uid 4242 owns
    kubeconfig(planted)
    assert f"directory {planted.parent} is owned by uid {ATTACKER}" in load_kubeconfig(planted)
    writable = kubeconfig(tmp_path / "writable")
    writable.chmod(0o666)
    assert "is writable by group or others (mode 0666)" in load_kubeconfig(writable)


def secret_volume(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """How the kubelet mounts a Secret: ``name -> ..data/name``, ``..data -> ..2026_12_04_…``, all root's."""
    volume = tmp_path / "secret"
    stamped = volume / "..2026_12_04_15_00_00.1"
    stamped.mkdir(parents=True)
    (volume / "..data").symlink_to(stamped.name)
    (volume / name).symlink_to(f"..data/{name}")
    return volume / name, stamped / name


def test_a_kubernetes_secret_volume_is_read_through_its_own_links(tmp_path: Path) -> None:
    """kubeconfig and NetQ credentials follow links root (or topocast's user) made; the token never does."""
    netq_path, netq_real = secret_volume(tmp_path / "n", "credentials.json")
    netq_file(netq_real).chmod(0o644)  # Secret volumes are 0644 by default
    assert load_credentials(str(netq_path)).username == "admin"
    kube_path, kube_real = secret_volume(tmp_path / "k", "config")
    kubeconfig(kube_real)
    build_client(K8sConnection(auth="kubeconfig", kubeconfig=str(kube_path))).close()
    token_path, token_real = secret_volume(tmp_path / "t", "jwt")
    token_real.write_text(TOKEN)
    token_real.chmod(0o600)
    with pytest.raises(TokenError, match="is a symbolic link"):
        read_token(str(token_path))


def test_a_readable_kubeconfig_of_roots_own_is_used(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config")
    path.chmod(0o644)  # kubeconfigs are often group-readable: only writing and links are refused
    client = build_client(K8sConnection(auth="kubeconfig", kubeconfig=str(path)))
    assert client.server == "http://127.0.0.1:9"
    client.close()


# ----- NetQ credentials -----------------------------------------------------------------------------


def netq_file(path: Path) -> Path:
    path.write_text(json.dumps({"username": "admin", "password": "netq-s3cret"}))
    path.chmod(0o600)
    return path


@as_root
def test_netq_credentials_another_user_owns_or_links_are_refused(tmp_path: Path) -> None:
    owned = netq_file(tmp_path / "owned.json")
    os.chown(owned, ATTACKER, ATTACKER)
    with pytest.raises(ProviderError, match=f"is owned by uid {ATTACKER}"):
        load_credentials(str(owned))
    link = tmp_path / "link.json"
    link.symlink_to(root_only(tmp_path))
    os.lchown(link, ATTACKER, ATTACKER)
    with pytest.raises(ProviderError, match=f"is a link owned by uid {ATTACKER}") as info:
        load_credentials(str(link))
    assert ROOT_ONLY not in str(info.value)
    hop = attacker_dir(tmp_path) / "hop.json"  # root's link, through a directory uid 4242 owns
    hop.symlink_to(netq_file(tmp_path / "real.json"))
    os.lchown(hop, 0, 0)
    via = tmp_path / "via.json"
    via.symlink_to(hop)
    with pytest.raises(ProviderError, match=f"directory {hop.parent} is owned by uid {ATTACKER}"):
        load_credentials(str(via))
    readable = netq_file(tmp_path / "readable.json")
    readable.chmod(0o644)  # read, with the warning it always had
    assert "readable by other users" in load_credentials(str(readable)).notes[0]
