"""Terraform checks that run offline: fmt, init + validate with the local AWS provider mirror, terraform test.

``terraform test`` runs ``infra/terraform/modules/aws/tests/*.tftest.hcl`` with
``mock_provider "aws"``: rule patterns, queue redrive, function environment,
IAM statements and input validation, asserted on the planned/applied wiring, and
``plan.tftest.hcl``: what an apply creates with the defaults (the inventory the module
README's cost note prices), planned with no AWS account. The GCP module has the same
``plan.tftest.hcl`` under ``mock_provider "google"``, run only where a hashicorp/google
mirror exists: mock_provider still needs the provider binary for its schema, and this
machine has none, so here it skips with that reason and keeps fmt and hcl2/checkov checks.
A full ``terraform test`` of the AWS module takes about 4 minutes on a loaded 2-core machine, so
init, validate and test are marked ``infra`` (CI's second tier); the fmt check stays in the default run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from terraform_support import (
    GOOGLE_PROVIDER,
    TERRAFORM_DIR,
    check,
    cli_config,
    copy_terraform,
    require_aws_mirror,
    require_google_mirror,
    run,
)


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


@pytest.mark.infra
@pytest.mark.parametrize("sub", ["modules/aws", "examples/aws-account"])
def test_aws_configuration_is_valid(initialised: tuple[Path, Path], sub: str) -> None:
    tree, config = initialised
    out = check(run(["validate"], tree / sub, config), f"terraform validate {sub}")
    assert "The configuration is valid" in out


@pytest.mark.infra
def test_aws_module_wiring_under_mock_provider(initialised: tuple[Path, Path]) -> None:
    tree, config = initialised
    module = tree / "modules" / "aws"
    files = sorted(p.name for p in (module / "tests").glob("*.tftest.hcl"))
    assert files, "no terraform test files in modules/aws/tests"
    assert "plan.tftest.hcl" in files, "the inventory plan (the cost note's) is missing"
    out = check(run(["test"], module, config, timeout=900), "terraform test")
    # every file ran and every run passed (a run that errors is reported as failed, not skipped)
    assert "Success!" in out and " 0 failed" in out, out
    assert "skipped" not in out.split("Success!")[-1], out


@pytest.mark.infra
def test_gcp_module_plans_under_mock_provider(tmp_path: Path) -> None:
    mirror = require_google_mirror()
    config = cli_config(tmp_path, mirror, GOOGLE_PROVIDER)
    module = copy_terraform(tmp_path) / "modules" / "gcp"
    check(run(["init", "-backend=false", "-input=false"], module, config), "terraform init modules/gcp")
    out = check(run(["test"], module, config, timeout=900), "terraform test modules/gcp")
    assert "Success!" in out and " 0 failed" in out, out
