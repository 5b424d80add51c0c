"""The Terraform examples pass every variable an operator tunes, with the module's own default, and the GCP
module's bucket enforces generation_retention_days (read with python-hcl2; the AWS module's rules also run
under ``terraform test``: modules/aws/tests/retention.tftest.hcl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

hcl2 = pytest.importorskip("hcl2", reason="python-hcl2 is needed to read the Terraform (pip install -e .[dev])")

TF = Path(__file__).resolve().parent.parent / "infra" / "terraform"

#: what an operator of each cloud sets (issue 32: the AWS example passed neither pull_watch_head_nodes,
#: debounce_leading_edge nor topology_source)
OPERATOR_VARIABLES = {
    ("aws", "aws-account"): [
        "topology_source", "overlays", "pull_watch_head_nodes", "debounce_quiet_seconds", "debounce_max_wait_seconds",
        "debounce_leading_edge", "generation_retention_days", "noncurrent_version_days", "lambda_architecture",
        "formats", "guard_max_loss", "reconcile_schedule",
    ],
    ("gcp", "gcp-project"): [
        "zones", "pull_watch_subscribers", "debounce_quiet_seconds", "debounce_max_wait_seconds",
        "debounce_leading_edge", "generation_retention_days", "noncurrent_version_days", "formats", "guard_max_loss",
        "reconcile_schedule",
    ],
}  # fmt: skip


def load(path: Path) -> dict[str, Any]:
    opts = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
    with path.open() as f:
        return hcl2.load(f, serialization_options=opts)


def variables(path: Path) -> dict[str, Any]:
    return {name: body for block in load(path).get("variable", []) for name, body in block.items()}


@pytest.mark.parametrize(("cloud", "example"), list(OPERATOR_VARIABLES))
def test_the_example_passes_what_an_operator_tunes_with_the_module_defaults(cloud: str, example: str) -> None:
    module_vars = variables(TF / "modules" / cloud / "variables.tf")
    example_vars = variables(TF / "examples" / example / "variables.tf")
    call = next(b["topocast"] for b in load(TF / "examples" / example / "main.tf")["module"] if "topocast" in b)
    for name in OPERATOR_VARIABLES[(cloud, example)]:
        assert name in module_vars, f"the {cloud} module has no variable {name}"
        assert call.get(name) == f"${{var.{name}}}", f"examples/{example} does not pass {name}"
        # a null passed to the module would replace its default: the example must carry the same one
        assert example_vars[name].get("default") == module_vars[name].get("default"), name


def test_the_gcp_bucket_deletes_old_generations_never_the_pointers() -> None:
    bucket = load(TF / "modules" / "gcp" / "storage.tf")["resource"]
    data = next(b["google_storage_bucket"]["data"] for b in bucket if "data" in b.get("google_storage_bucket", {}))
    rule = next(d["lifecycle_rule"] for d in data["dynamic"] if "lifecycle_rule" in d)
    assert rule["for_each"] == "${var.generation_retention_days == null ? [] : [var.generation_retention_days]}"
    content = rule["content"][0]
    condition = content["condition"][0]
    assert condition["age"] == "${lifecycle_rule.value}" and condition["with_state"] == "LIVE"
    # generation names are 12 digits: "graphs/0" matches graphs/000000000042.json, not graphs/latest.json
    assert condition["matches_prefix"] == ["${local.key_base}/graphs/0", "${local.key_base}/rendered/0"]
    assert content["action"] == [{"type": "Delete"}]
    assert variables(TF / "modules" / "gcp" / "variables.tf")["generation_retention_days"]["default"] is None
