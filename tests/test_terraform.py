"""Terraform checks that run offline: fmt, init + validate with the local AWS provider mirror, terraform test.

``terraform test`` runs ``infra/terraform/modules/aws/tests/*.tftest.hcl`` with
``mock_provider "aws"``: rule patterns, queue redrive, function environment,
IAM statements and input validation, asserted on the planned/applied wiring.
The GCP module has no provider here (the google provider is not mirrored), so
it gets fmt here and hcl2/checkov checks elsewhere.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from terraform_support import TERRAFORM_DIR, check, cli_config, copy_terraform, require_aws_mirror, run


def test_every_terraform_file_is_formatted(tmp_path: Path) -> None:
    proc = run(["fmt", "-check", "-recursive", "-diff", str(TERRAFORM_DIR)], tmp_path, cli_config(tmp_path, None))
    assert proc.returncode == 0, f"terraform fmt -check -recursive found unformatted files:\n{proc.stdout}"


@pytest.fixture(scope="module")
def initialised(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of infra/terraform with the AWS module and example initialised from the mirror."""
    mirror = require_aws_mirror()
    tmp = tmp_path_factory.mktemp("tf")
    config = cli_config(tmp, mirror)
    tree = copy_terraform(tmp)
    for sub in ("modules/aws", "examples/aws-account"):
        check(run(["init", "-backend=false", "-input=false"], tree / sub, config, timeout=120), f"terraform init {sub}")
    return tree, config


@pytest.mark.parametrize("sub", ["modules/aws", "examples/aws-account"])
def test_aws_configuration_is_valid(initialised: tuple[Path, Path], sub: str) -> None:
    tree, config = initialised
    out = check(run(["validate"], tree / sub, config), f"terraform validate {sub}")
    assert "The configuration is valid" in out


def test_aws_module_wiring_under_mock_provider(initialised: tuple[Path, Path]) -> None:
    tree, config = initialised
    module = tree / "modules" / "aws"
    files = sorted(p.name for p in (module / "tests").glob("*.tftest.hcl"))
    assert files, "no terraform test files in modules/aws/tests"
    out = check(run(["test"], module, config, timeout=180), "terraform test")
    # every file ran and every run passed (a run that errors is reported as failed, not skipped)
    assert "Success!" in out and " 0 failed" in out, out
    assert "skipped" not in out.split("Success!")[-1], out
