"""Code <-> infrastructure consistency: what Terraform wires must be what the functions do.

The Terraform is read with python-hcl2 (expressions stay strings), the code with
:mod:`callscan`, a static scan from each ``functions/<stage>/handler.py`` (or
GCP ``main.py``) through the ``topocast`` package. Why a static scan: it needs
no cloud and no handler run, and it fails in both directions. A boto3 call added
to code that a stage reaches (``self.ssm.delete_parameter``) shows up as an
action the role does not grant; an action left in a role after the code stopped
calling it shows up as granted-but-never-called. ``topocast.aws.iam.CALLS`` is
the readable contract in between: the scan must find exactly it, the roles must
grant exactly it (minus ``NOT_GRANTED``, plus ``IMPLIED`` and ``PLATFORM``), the
``CONDITIONAL`` ones only in statements gated on the module input that needs
them, and handler tests can check real calls against it with ``record_calls``.

Also checked: handler and entry-point names, every environment variable
Terraform sets is one the code reads (``env_table()``: the settings' and the providers' own, or
Powertools), every provider option with a variable is passed by each module that runs that provider
(or listed with why not), each function
gets the settings its code insists on (``settings.require(...)``) and no setting
of another stage, Terraform's defaults equal the code's, the S3 key areas the
roles grant are where the stores write, and on GCP the audit-log methods,
reconcile event type and service-account roles.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from callscan import CallScanner, ScanResult

hcl2 = pytest.importorskip("hcl2", reason="python-hcl2 is needed to read the Terraform (pip install -e .[dev])")

REPO = Path(__file__).resolve().parent.parent
AWS_MODULE = REPO / "infra" / "terraform" / "modules" / "aws"
GCP_MODULE = REPO / "infra" / "terraform" / "modules" / "gcp"
STAGES = ("discover", "render", "publish")
#: library-read variables Terraform may set besides TOPOCAST_* (checked against Powertools' own constants)
POWERTOOLS_ENV = ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_LOG_LEVEL")
#: attribute names too generic to follow on GCP (``x.send(`` is mostly httpx/requests, not topocast)
GCP_UNFOLLOWED = frozenset({"send", "get", "put", "list", "delete", "load", "save", "read", "write", "close", "run"})


# ----- reading Terraform ---------------------------------------------------------------------------------
@cache
def load_module(path: Path) -> dict[str, Any]:
    """Blocks of every .tf file in ``path``: {"resource": {type: {name: body}}, "data": ..., "locals": {...},
    "variable": {name: body}}."""
    opts = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
    out: dict[str, Any] = {"resource": {}, "data": {}, "locals": {}, "variable": {}}
    for tf in sorted(path.glob("*.tf")):
        with tf.open() as f:
            doc = hcl2.load(f, serialization_options=opts)
        for kind in ("resource", "data"):
            for block in doc.get(kind, []):
                for rtype, named in block.items():
                    out[kind].setdefault(rtype, {}).update(named)
        for block in doc.get("locals", []):
            out["locals"].update(block)
        for block in doc.get("variable", []):
            out["variable"].update(block)
    return out


def collect(node: Any, key: str) -> list[Any]:
    """Every value stored under ``key`` anywhere in ``node`` (statements, dynamic blocks, content)."""
    found: list[Any] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                found.append(v)
            found += collect(v, key)
    elif isinstance(node, list):
        for item in node:
            found += collect(item, key)
    return found


def actions_of(doc: dict[str, Any]) -> set[str]:
    return {a for actions in collect(doc.get("statement", []), "actions") + collect(doc.get("dynamic", []), "actions")
            for a in actions}  # fmt: skip


def stage_env(module: dict[str, Any], stage: str) -> dict[str, str]:
    """Environment of one function: common_env merged with stage_env[stage] (main.tf's function_env)."""
    env_expr = module["locals"]["function_env"]
    assert "local.common_env" in env_expr and "local.stage_env[fn]" in env_expr, (
        f"function_env is no longer merge(common_env, stage_env[fn]); update this test: {env_expr}"
    )
    return {**module["locals"]["common_env"], **module["locals"]["stage_env"][stage]}


def literal_set(expr: str) -> set[str]:
    """The quoted words of ``toset(["a", "b"])``-like expressions."""
    return set(re.findall(r'"([^"]+)"', expr))


# ----- scanning code ------------------------------------------------------------------------------------------
@cache
def aws_scan(stage: str) -> ScanResult:
    handler = REPO / "functions" / stage / "handler.py"
    if not handler.is_file():
        pytest.fail(f"{handler} is missing: Terraform deploys handler.handler from it")
    return CallScanner(REPO / "shared").scan(handler, "handler")


@cache
def gcp_scan(stage: str) -> ScanResult:
    return CallScanner(REPO / "shared", unfollowed=GCP_UNFOLLOWED).scan_module(
        "topocast.gcp.handlers", [stage, "handle", "build"]
    )


def settings_fields() -> dict[str, tuple[str, str]]:
    from topocast.config import env_table

    return env_table()


def option_defaults(var: str, cloud: str) -> list[Any]:
    """The defaults of the provider options read from ``var``: the module's own cloud provider's when it
    declares the variable (TOPOCAST_NAME_FROM is aws's and gcp's, with their own defaults), else every one's."""
    from topocast.providers import provider_models
    from topocast.providers.options import option_specs

    by_provider = {
        name: field.get_default(call_default_factory=True)
        for name, model in provider_models().items()
        for _, field, spec in option_specs(model)
        if spec.env == var
    }
    return [by_provider[cloud]] if cloud in by_provider else list(by_provider.values())


# ===== AWS =========================================================================================================
def test_lambda_handler_string_names_a_function_the_package_has() -> None:
    fn = load_module(AWS_MODULE)["resource"]["aws_lambda_function"]["this"]
    module_name, _, func = fn["handler"].partition(".")
    assert literal_set(load_module(AWS_MODULE)["locals"]["functions"]) == set(STAGES)
    for stage in STAGES:
        # topocast.cli.package puts functions/<stage>/handler.py at the zip root as handler.py
        path = REPO / "functions" / stage / f"{module_name}.py"
        tree = ast.parse(path.read_text())
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        names |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
        assert func in names, f"{path} defines no {func!r}, but Lambda is told handler = {fn['handler']!r}"


@pytest.mark.parametrize("stage", STAGES)
def test_code_calls_exactly_the_declared_aws_actions(stage: str) -> None:
    from topocast.aws.iam import CALLS

    scan = aws_scan(stage)
    assert scan.problems == [], "the scan could not decide:\n" + "\n".join(scan.problems)
    found = set(scan.actions)
    missing = {a: sorted(scan.actions[a]) for a in found - CALLS[stage]}
    assert not missing, f"{stage} code calls actions topocast.aws.iam.CALLS does not list: {missing}"
    assert not CALLS[stage] - found, (
        f"CALLS[{stage!r}] lists {sorted(CALLS[stage] - found)}, which no code reachable from "
        f"functions/{stage}/handler.py calls"
    )


@pytest.mark.parametrize("stage", STAGES)
def test_role_grants_exactly_what_the_function_calls(stage: str) -> None:
    from topocast.aws.iam import NOT_GRANTED, PLATFORM, granted

    module = load_module(AWS_MODULE)
    docs = module["data"]["aws_iam_policy_document"]
    assert f"data.aws_iam_policy_document.{stage}.json" in module["locals"]["role_policies"][stage]
    assert docs[stage]["source_policy_documents"] == [f'${{data.aws_iam_policy_document.platform["{stage}"].json}}'], (
        f"the {stage} policy must include its platform statements"
    )
    own = actions_of(docs[stage])
    platform = actions_of(docs["platform"])
    assert platform <= PLATFORM, f"platform statements grant more than PLATFORM: {sorted(platform - PLATFORM)}"
    want = granted(stage)
    reasons = NOT_GRANTED.get(stage, {})
    assert not want - own, f"the {stage} role lacks {sorted(want - own)}, which its code calls"
    extra = own - want
    assert not extra, f"the {stage} role grants {sorted(extra)}, which its code never calls" + "".join(
        f"\n  {a}: deliberately not granted: {reasons[a]}" for a in sorted(extra) if a in reasons
    )


def test_iam_contract_is_coherent() -> None:
    from topocast.aws.iam import contract_problems

    assert contract_problems() == []


def variables_behind(expr: str, local_values: dict[str, Any], depth: int = 0) -> set[str]:
    """Module variables an expression depends on, following ``local.x`` through the locals (by text)."""
    found = set(re.findall(r"\bvar\.(\w+)", expr))
    if depth < 5:
        for name in set(re.findall(r"\blocal\.(\w+)", expr)):
            if name in local_values:
                found |= variables_behind(str(local_values[name]), local_values, depth + 1)
    return found


@pytest.mark.parametrize("stage", STAGES)
def test_conditional_grants_exist_only_with_their_inputs(stage: str) -> None:
    from topocast.aws.iam import CONDITIONAL

    module = load_module(AWS_MODULE)
    doc = module["data"]["aws_iam_policy_document"][stage]
    conditional = CONDITIONAL.get(stage, {})
    for statement in doc.get("statement", []):
        fixed = set(statement.get("actions", [])) & conditional.keys()
        assert not fixed, (
            f"{stage}: statement {statement.get('sid')} always grants {sorted(fixed)}, which only some "
            "configurations need: " + "; ".join(f"{a}: {conditional[a].why}" for a in sorted(fixed))
        )
    gated: set[str] = set()
    for block in doc.get("dynamic", []):
        body = block["statement"]
        actions = {a for content in body["content"] for a in content.get("actions", [])}
        sid = body["content"][0].get("sid")
        unexpected = actions - conditional.keys()
        assert not unexpected, (
            f"{stage}: dynamic statement {sid} grants {sorted(unexpected)} only sometimes, but the code always "
            "needs them (or list them in topocast.aws.iam.CONDITIONAL)"
        )
        inputs = variables_behind(body["for_each"], module["locals"])
        for action in actions:
            assert inputs & conditional[action].inputs, (
                f"{stage}: {sid} grants {action} when {body['for_each']} (inputs {sorted(inputs)}); it is needed "
                f"for {conditional[action].why}, i.e. with {sorted(conditional[action].inputs)}"
            )
        gated |= actions
    assert gated == set(conditional), f"{stage}: CONDITIONAL lists {sorted(set(conditional) - gated)}, never granted"


def test_each_role_is_used_by_its_own_function() -> None:
    fn = load_module(AWS_MODULE)["resource"]["aws_lambda_function"]["this"]
    assert fn["role"] == "${aws_iam_role.this[each.key].arn}"
    policy = load_module(AWS_MODULE)["resource"]["aws_iam_role_policy"]["this"]
    assert policy["role"] == "${aws_iam_role.this[each.key].id}"
    assert policy["policy"] == "${local.role_policies[each.key]}"


@pytest.mark.parametrize("stage", STAGES)
def test_env_vars_set_by_terraform_are_read_by_the_code(stage: str) -> None:
    from aws_lambda_powertools.shared import constants

    env = stage_env(load_module(AWS_MODULE), stage)
    known = settings_fields()
    library = {v for v in vars(constants).values() if isinstance(v, str)}
    for var in env:
        if var.startswith("TOPOCAST_"):
            assert var in known, f"Terraform sets {var} on {stage}, but topocast.config.ENV_VARS has no such variable"
        else:
            assert var in POWERTOOLS_ENV and var in library, f"Terraform sets {var} on {stage}; nothing reads it"


@pytest.mark.parametrize("stage", STAGES)
def test_each_function_gets_the_settings_its_code_uses(stage: str) -> None:
    scan = aws_scan(stage)
    env = stage_env(load_module(AWS_MODULE), stage)
    field_of = {var: field for var, (field, _) in settings_fields().items()}
    unused = [v for v in env if v.startswith("TOPOCAST_") and field_of[v] not in scan.attributes]
    assert not unused, f"Terraform gives {stage} {unused}, but no code {stage} runs reads those settings"
    var_of = {field: var for var, field in field_of.items()}
    required = {var_of[f] for f in scan.required if f in var_of}
    assert required <= set(env), f"{stage}'s code requires {sorted(required - set(env))}, which Terraform does not set"


#: (module, variable) whose default deliberately differs from the code's, with why
DEFAULT_DIVERGENCES = {
    ("gcp", "publishers"): "Settings defaults to the AWS publisher (ssm); Google Cloud has no SSM, so gcs",
}


def _default_of(expr: str, variables: dict[str, Any]) -> tuple[str, Any] | None:
    """``${var.x}`` / ``${join(";", var.x)}`` / ``${tostring(var.x)}`` -> (x, default as the code sees it)."""
    m = re.fullmatch(r"\$\{(?:(join)\(\";\", |(tostring)\()?var\.(\w+)\)?\}", expr)
    if not m or m.group(3) not in variables or variables[m.group(3)].get("default") is None:
        return None
    return m.group(3), variables[m.group(3)]["default"]


@pytest.mark.parametrize("module_dir", [AWS_MODULE, GCP_MODULE], ids=["aws", "gcp"])
def test_terraform_defaults_equal_the_code_defaults(module_dir: Path) -> None:
    from topocast.config import Settings

    module = load_module(module_dir)
    field_of = {var: field for var, (field, _) in settings_fields().items()}
    compared = 0
    for stage in STAGES:
        for var, expr in stage_env(module, stage).items():
            got = _default_of(expr, module["variable"]) if isinstance(expr, str) else None
            if got is None or not var.startswith("TOPOCAST_"):
                continue
            name, default = got
            if (module_dir.name, name) in DEFAULT_DIVERGENCES:
                continue
            if field_of[var] == "provider_env":  # a provider's own variable: its Options model has the default
                code_defaults, where = option_defaults(var, module_dir.name), "the provider's Options model"
            else:
                code_defaults = [Settings.model_fields[field_of[var]].get_default(call_default_factory=True)]
                where = "topocast.config.Settings"
            for code_default in code_defaults:
                if isinstance(code_default, float | int) and not isinstance(code_default, bool):
                    default = float(default)
                assert default == code_default, (
                    f"{module_dir.name}: variable {name} defaults to {default!r} but {var} defaults to "
                    f"{code_default!r} in {where}"
                )
            compared += 1
    assert compared >= 5, "the default comparison matched almost nothing; did main.tf's env expressions change?"


def module_providers(module_dir: Path) -> set[str]:
    """The providers a module's discover function can run, read from the module: the quoted names of its
    ``TOPOCAST_PROVIDER`` expression, or of the validation of ``var.topology_source`` when it passes that on."""
    module = load_module(module_dir)
    expr = str(stage_env(module, "discover")["TOPOCAST_PROVIDER"])
    if "var.topology_source" in expr:
        expr = " ".join(v["condition"] for v in module["variable"]["topology_source"].get("validation", []))
    return literal_set(expr)


@pytest.mark.parametrize("module_dir", [AWS_MODULE, GCP_MODULE], ids=["aws", "gcp"])
def test_a_module_runs_only_providers_of_the_registry(module_dir: Path) -> None:
    from topocast.providers import PROVIDERS

    runs = module_providers(module_dir)
    assert module_dir.name in runs and runs <= PROVIDERS.keys(), (runs, sorted(PROVIDERS))


#: (module, variable) a provider option reads that the module deliberately does not pass, with why
NOT_PASSED = {
    ("aws", "TOPOCAST_RESERVED_NODES"): "capacity-reservation names are set by hand (docs/aws.md); no module input yet",
    (
        "gcp",
        "TOPOCAST_GCP_READ",
    ): "the cost policy's override for tests and benchmarks; auto is what a deployment wants",
}


@pytest.mark.parametrize("module_dir", [AWS_MODULE, GCP_MODULE], ids=["aws", "gcp"])
def test_every_provider_variable_is_passed_by_the_modules_that_run_the_provider(module_dir: Path) -> None:
    """Adding an option with a variable to a provider's Options model needs the Terraform input too."""
    from topocast.providers import provider_models
    from topocast.providers.options import OptionSpec, option_specs

    module = load_module(module_dir)
    env = stage_env(module, "discover")
    wanted: dict[str, list[str]] = {}
    for name, model in provider_models().items():
        if name not in module_providers(module_dir):
            continue
        specs = [spec for _, _, spec in option_specs(model)]
        whole = getattr(model, "ENV_OBJECT", None)
        for spec in [*specs, *([whole] if isinstance(whole, OptionSpec) else [])]:
            if spec.env:
                wanted.setdefault(spec.env, []).append(name)
    assert wanted, "no provider variable found: did the Options models lose their OptionSpec?"
    reasons = {var: why for (cloud, var), why in NOT_PASSED.items() if cloud == module_dir.name}
    missing = {var: who for var, who in wanted.items() if var not in env and var not in reasons}
    assert not missing, (
        f"{module_dir.name} Terraform does not pass {missing} (variable: providers) on discover: add a module input "
        "and the environment entry in main.tf, or list it in NOT_PASSED with why"
    )
    passed_anyway = sorted(var for var in reasons if var in env)
    assert passed_anyway == [], f"NOT_PASSED lists {passed_anyway}, which the module does pass"
    for var in env:  # and the module's inputs behind them exist
        for used in variables_behind(str(env[var]), module["locals"]):
            assert used in module["variable"], f"{var} = {env[var]} uses var.{used}, not a variable of the module"


@pytest.mark.parametrize("module_dir", [AWS_MODULE, GCP_MODULE], ids=["aws", "gcp"])
def test_terraform_debounce_defaults_and_check_are_the_code_s(module_dir: Path) -> None:
    """Terraform writes its own defaults for the quiet window and the max wait: they are the code's, and
    both sides refuse a quiet window longer than the max wait (Settings: test_config.py)."""
    from topocast.config import DEFAULT_DEBOUNCE_MAX_WAIT, DEFAULT_DEBOUNCE_QUIET

    variables = load_module(module_dir)["variable"]
    quiet, max_wait = variables["debounce_quiet_seconds"], variables["debounce_max_wait_seconds"]
    assert (float(quiet["default"]), float(max_wait["default"])) == (DEFAULT_DEBOUNCE_QUIET, DEFAULT_DEBOUNCE_MAX_WAIT)
    conditions = [str(v["condition"]) for v in max_wait["validation"]]
    assert any("var.debounce_max_wait_seconds >= var.debounce_quiet_seconds" in c for c in conditions), conditions


def test_s3_areas_granted_are_where_the_stores_write() -> None:
    """Each role is scoped to <prefix>/<cluster>/<area>/*; the stores must write under those areas."""
    from topocast.aws.publish_state import S3PublishState
    from topocast.aws.root import AwsRuntime
    from topocast.aws.s3_artifacts import S3ArtifactStore
    from topocast.aws.s3_store import S3GraphStore
    from topocast.config import Settings

    objects = load_module(AWS_MODULE)["locals"]["objects"]
    areas = literal_set(objects.split(":")[0])
    # quarantine/ and last-good/: topocast.agents.collect.read_good_uploads (tests/test_collect.py checks the keys)
    assert areas == {"graphs", "rendered", "published", "state", "uploads", "quarantine", "last-good"}, objects
    base = "topocast/c1"
    assert S3GraphStore("b", "topocast", "c1", None).generation_key(1).startswith(f"{base}/graphs/")
    assert S3ArtifactStore("b", "topocast", "c1", None).key(1, "topology.conf").startswith(f"{base}/rendered/")
    state = S3PublishState("b", "topocast", "c1", None)
    assert state.published_key.startswith(f"{base}/state/") and state.hold_key.startswith(f"{base}/state/")
    settings = Settings(cluster="c1", bucket="b", prefix="topocast", publishers=["ssm"])
    ssm = AwsRuntime(settings, region="us-east-1").publishers()[0]
    key = ssm.s3_key(12, "topology.conf")
    assert key.startswith(f"{base}/published/"), (
        f"SSM values too large for a parameter go to s3://b/{key}, but the publish role may only write "
        f"{base}/published/* and {base}/state/* (and the pull agent only reads {base}/published/*): construct "
        "SsmPublisher with s3_prefix=f'{prefix}/{cluster}/published'"
    )


def test_uploads_notification_matches_where_collectors_upload() -> None:
    from topocast.config import Settings

    module = load_module(AWS_MODULE)
    assert module["locals"]["uploads_key"] == "${local.key_base}/uploads/"
    uri = Settings(cluster="c1", bucket="b", prefix="topocast").uploads_uri
    assert uri == "s3://b/topocast/c1/uploads", f"collectors upload to {uri}, the notification watches uploads/"


def test_event_patterns_name_events_the_parser_handles() -> None:
    # the patterns come from the event table; tests/test_event_wiring.py checks them kind by kind
    text = str(load_module(AWS_MODULE)["locals"])
    assert 'file("${path.module}/event-patterns.json")' in text
    assert "Reconcile" in text


# ===== GCP =========================================================================================================
def test_gcp_entry_points_exist() -> None:
    fn = load_module(GCP_MODULE)["resource"]["google_cloudfunctions2_function"]["this"]
    assert fn["build_config"][0]["entry_point"] == "${each.key}"
    handlers = ast.parse((REPO / "shared" / "topocast" / "gcp" / "handlers.py").read_text())
    table = next(
        n.value for n in handlers.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id == "_HANDLERS"
    )  # fmt: skip
    assert isinstance(table, ast.Dict)
    dispatch = {k.value: v.id for k, v in zip(table.keys, table.values, strict=True)}  # type: ignore[union-attr]
    for stage in STAGES:
        main = REPO / "functions" / stage / "main.py"
        tree = ast.parse(main.read_text())
        func = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == stage), None)
        assert func is not None, f"{main} has no function {stage!r} (the Cloud Functions entry point)"
        calls = [c for c in ast.walk(func) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "handle"]
        assert calls and isinstance(calls[0].args[0], ast.Constant) and calls[0].args[0].value == stage, (
            f"{main}: {stage}() must call handle({stage!r}, ...)"
        )
        assert dispatch[stage] == stage, f"handlers._HANDLERS[{stage!r}] is {dispatch[stage]}, not {stage}"


#: (stage, variable) Terraform sets (common_env: every function) that the stage's code does not read, with why
GCP_UNREAD = {
    ("publish", "TOPOCAST_TASK_QUEUE"): "publish sends no task; the root builds the queue only when a stage uses it",
    ("publish", "TOPOCAST_TASKS_SERVICE_ACCOUNT"): "the identity of tasks, which publish does not send",
}


@pytest.mark.parametrize("stage", STAGES)
def test_gcp_env_vars_are_read_by_the_code(stage: str) -> None:
    env = stage_env(load_module(GCP_MODULE), stage)
    field_of = {var: field for var, (field, _) in settings_fields().items()}
    unknown = [v for v in env if v not in field_of]
    assert not unknown, f"GCP Terraform sets {unknown} on {stage}; topocast.config.ENV_VARS does not know them"
    scan = gcp_scan(stage)
    assert scan.problems == []
    unused = [v for v in env if field_of[v] not in scan.attributes and (stage, v) not in GCP_UNREAD]
    assert not unused, f"GCP Terraform gives {stage} {unused}, but no code {stage} runs reads those settings"
    assert all(v in env for s, v in GCP_UNREAD if s == stage), "GCP_UNREAD names a variable Terraform no longer sets"
    var_of = {f: v for v, f in field_of.items()}
    required = {var_of[f] for f in scan.required if f in var_of}
    assert required <= set(env), f"GCP {stage} requires {sorted(required - set(env))}"


def test_gcp_triggers_name_events_the_parser_handles() -> None:
    from topocast.gcp import events

    module = load_module(GCP_MODULE)
    methods = module["variable"]["audit_log_methods"]["default"]
    assert set(methods) <= set(events.METHOD_ACTIONS), sorted(set(methods) - set(events.METHOD_ACTIONS))
    trigger = module["resource"]["google_eventarc_trigger"]["audit"]
    criteria = {c["attribute"]: c["value"] for c in trigger["matching_criteria"]}
    assert criteria["type"] == events.AUDIT_LOG and criteria["serviceName"] == events.COMPUTE
    job = module["resource"]["google_cloud_scheduler_job"]["reconcile"]["http_target"][0]
    assert job["headers"]["ce-type"] == events.RECONCILE
    assert "cluster = var.cluster" in job["body"]


#: permission needed -> the narrowest predefined role granting it (as this module binds it)
GCP_ROLE_FOR = {
    "compute.instances.list": "roles/compute.viewer",
    "cloudtasks.tasks.create": "roles/cloudtasks.enqueuer",
    "iam.serviceAccounts.actAs": "roles/iam.serviceAccountUser",
    "storage.objects.*": "roles/storage.objectUser",
    "container.clusters.get": "roles/container.clusterViewer",
}
#: granted although the scan cannot see the call, with why
GCP_UNDERIVABLE = {
    ("publish", "roles/container.clusterViewer"): "the Kubernetes publisher is built through the "
    "topocast.publish registry, which a static scan cannot follow",
}


def gcp_permissions(stage: str) -> set[str]:
    scan = gcp_scan(stage)
    reached = {r.split(":")[0] for r in scan.reached}
    perms = set()
    if "topocast.gcp.gcs" in reached:
        perms.add("storage.objects.*")
    if "aggregated_list" in scan.attributes and "topocast.providers.gcp.provider" in reached:
        perms.add("compute.instances.list")
    if "topocast.gcp.tasks:TaskQueue.send_event" in scan.reached:
        perms |= {"cloudtasks.tasks.create", "iam.serviceAccounts.actAs"}  # tasks carry the invoker's OIDC token
    if "topocast.k8s.auth:gke_cluster_endpoint" in scan.reached:
        perms.add("container.clusters.get")
    return perms


def gcp_granted_roles(stage: str) -> set[str]:
    roles = set()
    for rtype, named in load_module(GCP_MODULE)["resource"].items():
        if not rtype.endswith("_iam_member"):
            continue
        for body in named.values():
            member = body.get("member", "")
            if member == "${google_service_account.function[each.key].member}":
                stages = set(STAGES) if body["for_each"] == "${local.functions}" else literal_set(body["for_each"])
            elif m := re.fullmatch(r'\$\{google_service_account\.function\["(\w+)"\]\.member\}', member):
                stages = {m.group(1)}
            else:
                continue
            if stage in stages:
                roles.add(body["role"])
    return roles


@pytest.mark.parametrize("stage", STAGES)
def test_gcp_service_accounts_hold_exactly_the_roles_their_calls_need(stage: str) -> None:
    needed = {GCP_ROLE_FOR[p] for p in gcp_permissions(stage)}
    granted = gcp_granted_roles(stage)
    assert not needed - granted, f"GCP {stage} calls need {sorted(needed - granted)}, which its account lacks"
    extra = {r for r in granted - needed if (stage, r) not in GCP_UNDERIVABLE}
    assert not extra, f"the GCP {stage} account holds {sorted(extra)}, which nothing it runs needs"


# ===== docs ========================================================================================================
@pytest.mark.parametrize("module_dir", [AWS_MODULE, GCP_MODULE], ids=["aws", "gcp"])
def test_module_readme_lists_every_input_and_output(module_dir: Path) -> None:
    opts = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
    outputs: set[str] = set()
    for tf in module_dir.glob("*.tf"):
        with tf.open() as f:
            outputs |= {name for block in hcl2.load(f, serialization_options=opts).get("output", []) for name in block}
    readme = (module_dir / "README.md").read_text()
    listed = set(re.findall(r"^\| `([a-z0-9_]+)` \|", readme, re.MULTILINE))
    variables = set(load_module(module_dir)["variable"])
    assert variables - listed == set(), f"{module_dir.name}/README.md misses inputs {sorted(variables - listed)}"
    assert outputs - listed == set(), f"{module_dir.name}/README.md misses outputs {sorted(outputs - listed)}"
    assert listed - variables - outputs == set(), f"README lists unknown names {sorted(listed - variables - outputs)}"
    for name, body in load_module(module_dir)["variable"].items():
        assert body.get("description") and body.get("type"), f"variable {name} needs a description and a type"


def test_the_simulated_queues_time_out_like_the_terraform_ones() -> None:
    """The local event source mappings (topocast_sim.aws_pipeline) use Terraform's visibility timeouts and
    receive count, so a failed record returns when it would in production, after newer events."""
    import re

    from topocast_sim import aws_pipeline

    aws = load_module(AWS_MODULE)
    timeouts = aws["variable"]["lambda_timeout_seconds"]["type"]
    defaults = {fn: int(s) for fn, s in re.findall(r"(\w+)\s*=\s*optional\(number,\s*(\d+)\)", str(timeouts))}
    assert defaults == aws_pipeline.LAMBDA_TIMEOUT_SECONDS
    main = aws["resource"]["aws_sqs_queue"]["main"]
    assert "6 * var.lambda_timeout_seconds[each.value]" in str(main["visibility_timeout_seconds"])
    assert aws["locals"]["queue_consumer"] == aws_pipeline.QUEUE_CONSUMER
    assert aws_pipeline.VISIBILITY_SECONDS == {"events": 1800, "timer": 720, "publish": 1800}
    assert aws["variable"]["max_receive_count"]["default"] == aws_pipeline.MAX_RECEIVE_COUNT


def test_the_local_cloud_tasks_queue_retries_like_the_terraform_one() -> None:
    from topocast_sim.cloudtasks import FakeCloudTasks

    retry = load_module(GCP_MODULE)["resource"]["google_cloud_tasks_queue"]["tasks"]["retry_config"]
    retry = retry[0] if isinstance(retry, list) else retry
    fake = FakeCloudTasks()
    assert (fake.min_backoff, fake.max_backoff) == (float(retry["min_backoff"][:-1]), float(retry["max_backoff"][:-1]))
    assert (fake.max_doublings, fake.max_attempts) == (retry["max_doublings"], retry["max_attempts"])
    # 5 s doubling five times, then linear steps of 160 s, capped at 300 s (the Cloud Tasks reference's rule)
    assert [fake.backoff(n) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]
