"""Running Terraform offline in tests: find the binary and the hashicorp/aws mirror, work in temp copies.

The registry is unreachable here, so ``terraform init`` can only install the AWS
provider from a local filesystem mirror (offline-tooling.md §4). Tests call
:func:`require_terraform` / :func:`require_aws_mirror`, which skip with the
reason when either is missing (a fresh CI machine has neither); the GCP module's
``terraform test`` needs a hashicorp/google mirror (:func:`require_google_mirror`), which
this machine lacks. Nothing is
written into the repository or the home directory: each test copies
``infra/terraform`` into its temp dir and passes a CLI config file through
``TF_CLI_CONFIG_FILE``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TERRAFORM_DIR = REPO / "infra" / "terraform"
#: where a mirror is looked for when TOPOCAST_TF_PLUGIN_MIRROR is not set
MIRROR_CANDIDATES = (
    Path("/opt/tf-plugins"),
    Path("/usr/share/terraform/plugins"),
    Path("/usr/local/share/terraform/plugins"),
    Path.home() / ".terraform.d" / "plugins",
)
AWS_PROVIDER = "registry.terraform.io/hashicorp/aws"
GOOGLE_PROVIDER = "registry.terraform.io/hashicorp/google"


def terraform_bin() -> str | None:
    return os.environ.get("TERRAFORM") or shutil.which("terraform")


def provider_mirror(provider: str) -> Path | None:
    """A directory with ``<provider>/<version>/<os_arch>/terraform-provider-<name>*`` (e.g. hashicorp/aws)."""
    env = os.environ.get("TOPOCAST_TF_PLUGIN_MIRROR")
    name = provider.rsplit("/", 1)[1]
    for base in [Path(env)] if env else MIRROR_CANDIDATES:
        if any((base / provider).glob(f"*/*/terraform-provider-{name}_*")):
            return base
    return None


def aws_mirror() -> Path | None:
    return provider_mirror(AWS_PROVIDER)


def require_terraform() -> str:
    path = terraform_bin()
    if path is None:
        pytest.skip("terraform is not installed (put it on PATH or set TERRAFORM=/path/to/terraform)")
    return path


def require_aws_mirror() -> Path:
    mirror = aws_mirror()
    if mirror is None:
        where = os.environ.get("TOPOCAST_TF_PLUGIN_MIRROR") or ", ".join(str(p) for p in MIRROR_CANDIDATES)
        pytest.skip(
            f"no local mirror of {AWS_PROVIDER} in {where} (the registry is not reachable offline; "
            "set TOPOCAST_TF_PLUGIN_MIRROR to a filesystem mirror)"
        )
    return mirror


def require_google_mirror() -> Path:
    mirror = provider_mirror(GOOGLE_PROVIDER)
    if mirror is None:
        where = os.environ.get("TOPOCAST_TF_PLUGIN_MIRROR") or ", ".join(str(p) for p in MIRROR_CANDIDATES)
        pytest.skip(
            f'no local mirror of {GOOGLE_PROVIDER} in {where}: mock_provider "google" still loads the real '
            "provider binary for its schema (terraform test: 'Missing required provider'), and the registry is "
            "not reachable offline; the GCP module keeps its fmt, python-hcl2 and checkov checks"
        )
    return mirror


def cli_config(tmp: Path, mirror: Path | None, provider: str = AWS_PROVIDER) -> Path:
    """A CLI config that installs ``provider`` (hashicorp/aws) from ``mirror`` and nothing from the network."""
    path = tmp / f"terraformrc-{provider.rsplit('/', 1)[1]}"
    if mirror is None:
        path.write_text("")
    else:
        path.write_text(
            "provider_installation {\n"
            f'  filesystem_mirror {{\n    path    = "{mirror}"\n    include = ["{provider}"]\n  }}\n'
            f'  direct {{\n    exclude = ["{provider}"]\n  }}\n'
            "}\n"
        )
    return path


def copy_terraform(tmp: Path) -> Path:
    """``infra/terraform`` copied to ``tmp`` without local state or .terraform dirs; returns the copy."""
    dest = tmp / "terraform"
    shutil.copytree(
        TERRAFORM_DIR,
        dest,
        ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", ".terraform.lock.hcl", "*.tfplan"),
    )
    return dest


def run(
    args: list[str], cwd: Path, config: Path, *, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``terraform <args>``; on failure the assertion message carries its output."""
    full_env = {
        **os.environ,
        "TF_CLI_CONFIG_FILE": str(config),
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        "CHECKPOINT_DISABLE": "1",
        **(env or {}),
    }
    proc = subprocess.run(
        [require_terraform(), *args, "-no-color"] if args[0] != "fmt" else [require_terraform(), *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc


def check(proc: subprocess.CompletedProcess[str], what: str) -> str:
    assert proc.returncode == 0, (
        f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout
