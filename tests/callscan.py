"""Static scan: which cloud API operations can a function's code reach? (used by test_infra_wiring.py)

Starting from one entry function (``handler`` in ``functions/<stage>/handler.py``),
the scan follows a *name-based call graph* over the ``topocast`` package:

* a bare name ``foo`` is resolved lexically (the module's own ``foo`` or the
  one it imports), ``module.foo`` in that module; ``obj.foo`` reaches every
  *method* or property named ``foo`` of a class in a module the code has
  imported so far; ``self.foo`` looks in the enclosing class, the classes it
  inherits from, and its subclasses in the pool (a base class's template
  method calling ``self.publish_one`` runs the subclass's override); a class
  reaches its ``__init__``/``__post_init__``;
* a registry table (a module-level dict of ``"module:attr"`` strings, or a module-level object built
  from one: ``REGISTRY = Registry("provider", PROVIDERS)``) that reached code reads
  reaches every entry it names (the configuration picks one at run time), and the entries that
  pooled modules add at module level (``register_publisher("ssm", "topocast.aws.ssm_publish:from_inputs")``
  in a composition root adds to the tables of the module ``register_publisher`` comes from);
* a module joins the pool when it is imported at module level by a pooled
  module, or by an ``import`` inside a reached function (the code base imports
  SDKs and heavy modules lazily, so this keeps stages apart).

Inside reached functions an attribute ``<receiver>.<operation>`` is an AWS call
when ``operation`` is an operation of a boto3 service (botocore's model) and
the receiver's name says which service (``self.s3``, ``rt.sqs``,
``eks_client``); without such a hint an operation name that belongs to exactly
one scanned service still counts (``self.c.get_object``). ``get_paginator("x")``
counts as operation ``x``; a paginator whose name is computed counts as the
values of the module's ``IAM_ACTIONS`` constant, and is an error without one.

This over-approximates (any ``.get(`` reaches every ``get`` method in the
pool) and misses calls through clients whose names hide the service and whose
operation names are ambiguous; both show up as a failing wiring test with the
call sites named, never as a silent pass.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from topocast.aws.iam import iam_action

#: boto3 service names scanned for operations (the IAM prefix equals the service name for all of them)
AWS_SERVICES = (
    "ec2",
    "s3",
    "sqs",
    "dynamodb",
    "ssm",
    "eks",
    "sts",
    "events",
    "cloudwatch",
    "logs",
    "kms",
    "autoscaling",
    "secretsmanager",
)

#: a registry table's value: ``"topocast.module:attribute"``
_REGISTRY_ENTRY = re.compile(r"^topocast(\.\w+)+:\w+$")

#: (receiver name, method) pairs that look like AWS operations but are not, with what they are
NOT_AWS = {
    ("token", "get_secret_value"): "pydantic SecretStr",
    ("socket", "create_connection"): "the standard library (topocast.safeio.http opens its connections)",
}


@cache
def operations() -> dict[str, dict[str, str]]:
    """service -> {snake_case method name: OperationName}, from botocore's service models."""
    import botocore.session
    from botocore import xform_name

    session = botocore.session.get_session()
    out: dict[str, dict[str, str]] = {}
    for service in AWS_SERVICES:
        model = session.get_service_model(service)
        out[service] = {xform_name(op): op for op in model.operation_names}
    return out


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    #: local name -> (module, attribute or None) for module-level imports
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    #: simple name -> [(class name or None, def node)]
    defs: dict[str, list[tuple[str | None, ast.AST]]] = field(default_factory=dict)
    #: class name -> its base-class expressions as written (``Base``, ``module.Base``)
    bases: dict[str, list[ast.expr]] = field(default_factory=dict)
    iam_actions: tuple[str, ...] = ()
    #: module-level registry tables (name -> the ``"module:attr"`` targets of its values)
    registries: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: module-level registrations: (module of the registering function, its ``"module:attr"`` targets)
    registrations: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)


@dataclass
class ScanResult:
    #: IAM action -> call sites ("module:function")
    actions: dict[str, set[str]] = field(default_factory=dict)
    #: problems the scan cannot decide (computed paginator names without IAM_ACTIONS, ambiguous ops)
    problems: list[str] = field(default_factory=list)
    #: string constants in reached code (env var names are looked up here)
    strings: set[str] = field(default_factory=set)
    #: attribute names read in reached code (``settings.formats`` -> "formats")
    attributes: set[str] = field(default_factory=set)
    #: settings the code insists on: string arguments of ``<settings>.require(...)`` calls
    required: set[str] = field(default_factory=set)
    #: modules in the pool
    modules: set[str] = field(default_factory=set)
    #: reached functions ("module:Class.func")
    reached: set[str] = field(default_factory=set)


class CallScanner:
    """Scan the code reachable from one entry function; see the module docstring."""

    def __init__(
        self, package_root: Path, package: str = "topocast", *, unfollowed: frozenset[str] = frozenset()
    ) -> None:
        self.package_root = package_root  # the directory holding the package, e.g. <repo>/shared
        self.package = package
        #: method names not followed on receivers other than ``self`` (``x.send(`` is too often a library call)
        self.unfollowed = unfollowed
        self._modules: dict[str, _Module] = {}
        self._ancestors: dict[tuple[str, str], set[tuple[str, str]]] = {}

    # ----- modules ---------------------------------------------------------------------------------
    def _module_path(self, name: str) -> Path | None:
        if name != self.package and not name.startswith(self.package + "."):
            return None
        base = self.package_root.joinpath(*name.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def load(self, name: str, path: Path | None = None) -> _Module | None:
        if name in self._modules:
            return self._modules[name]
        path = path or self._module_path(name)
        if path is None:
            return None
        tree = ast.parse(path.read_text(), filename=str(path))
        mod = _Module(name, path, tree)
        for node in tree.body:
            for alias_name, target in self._imports_of(node, name):
                mod.imports[alias_name] = target
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                mod.defs.setdefault(node.name, []).append((None, node))
            elif isinstance(node, ast.ClassDef):
                mod.defs.setdefault(node.name, []).append((None, node))
                mod.bases[node.name] = list(node.bases)
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        mod.defs.setdefault(item.name, []).append((node.name, item))
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "IAM_ACTIONS" for t in node.targets
            ):
                mod.iam_actions = tuple(_string_values(node.value))
            call = node.value if isinstance(node, ast.Expr) else None
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):  # register_x("name", "module:attr")
                registered = [
                    a.value.partition(":")[::2]
                    for a in call.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str) and _REGISTRY_ENTRY.match(a.value)
                ]
                owner = mod.imports.get(call.func.id)
                if registered and owner is not None:
                    mod.registrations.append((owner[0], registered))
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Dict):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                entries = [
                    v.value.partition(":")[::2]
                    for v in node.value.values
                    if isinstance(v, ast.Constant) and isinstance(v.value, str) and _REGISTRY_ENTRY.match(v.value)
                ]
                for t in targets:
                    if isinstance(t, ast.Name) and (entries or not node.value.keys):  # {}: filled by registrations
                        mod.registries[t.id] = entries
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
                # REGISTRY = Registry("provider", PROVIDERS): a lookup in REGISTRY is one in the table
                tables = [a.id for a in node.value.args if isinstance(a, ast.Name) and a.id in mod.registries]
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if tables and isinstance(t, ast.Name):
                        mod.registries[t.id] = mod.registries[tables[0]]
        self._modules[name] = mod
        return mod

    def _imports_of(self, node: ast.AST, current: str) -> Iterable[tuple[str, tuple[str, str | None]]]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield (alias.asname or alias.name.split(".")[0]), (alias.name, None)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if self._module_path(sub) is not None:
                    yield (alias.asname or alias.name), (sub, None)
                else:
                    yield (alias.asname or alias.name), (node.module, alias.name)

    def _module_deps(self, mod: _Module) -> set[str]:
        """Modules executed when ``mod`` is imported: its imports plus the parent packages."""
        deps = {target for target, _ in mod.imports.values()}
        parts = mod.name.split(".")
        deps |= {".".join(parts[:i]) for i in range(1, len(parts))}
        return {d for d in deps if self._module_path(d) is not None}

    def _resolve_class(self, mod: _Module, expr: ast.expr) -> tuple[str, str] | None:
        """(module, class) a base-class expression names, when it is a class of the package."""
        if isinstance(expr, ast.Name):
            if expr.id in mod.bases:
                return mod.name, expr.id
            target = mod.imports.get(expr.id)
            if target is None or target[1] is None:
                return None
            module, name = target
        elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            target = mod.imports.get(expr.value.id)
            if target is None or target[1] is not None:
                return None
            module, name = target[0], expr.attr
        else:
            return None  # Generic[T], Protocol, calls: not package classes
        other = self.load(module)
        return (module, name) if other is not None and name in other.bases else None

    def ancestors(self, module: str, cls: str) -> set[tuple[str, str]]:
        """Every package class ``module.cls`` inherits from, transitively, as (module, class)."""
        if (module, cls) in self._ancestors:
            return self._ancestors[(module, cls)]
        found: set[tuple[str, str]] = set()
        todo = [(module, cls)]
        while todo:
            mod_name, name = todo.pop()
            mod = self.load(mod_name)
            for expr in mod.bases.get(name, []) if mod is not None else []:
                base = self._resolve_class(mod, expr)
                if base is not None and base not in found:
                    found.add(base)
                    todo.append(base)
        self._ancestors[(module, cls)] = found
        return found

    # ----- the scan ------------------------------------------------------------------------------------
    def scan(self, entry_path: Path, entry_name: str) -> ScanResult:
        """Scan from ``entry_name`` (a function or an imported name) in the file ``entry_path``."""
        entry = self.load(f"__entry__:{entry_path}", entry_path)
        assert entry is not None
        return self._scan(entry, [entry_name], str(entry_path))

    def scan_module(self, module: str, names: list[str]) -> ScanResult:
        """Scan from the functions (or classes, or ``Class.method``) ``names`` of package module ``module``."""
        entry = self.load(module)
        if entry is None:
            return ScanResult(problems=[f"module {module} not found under {self.package_root}"])
        return self._scan(entry, names, module)

    def _scan(self, entry: _Module, entry_names: list[str], label: str) -> ScanResult:
        result = ScanResult()
        pool: set[str] = set()
        wanted: set[str] = set()
        queue: list[tuple[_Module, str | None, ast.AST]] = []
        seen: set[int] = set()
        #: (module, class, method) of every ``self.method`` seen: subclasses loaded later get theirs too
        self_calls: set[tuple[str, str, str]] = set()
        #: module -> entries pooled modules registered into its tables; modules whose tables reached code read
        registered: dict[str, list[tuple[str, str]]] = {}
        tables_read: set[str] = set()

        def reach_entry(module: str, attr: str) -> None:
            add_module(module)
            if module in self._modules:
                enqueue_defs(self._modules[module], attr)

        def add_module(name: str) -> None:
            todo = [name]
            while todo:
                mod = self.load(todo.pop())
                if mod is None or mod.name in pool:
                    continue
                pool.add(mod.name)
                todo.extend(self._module_deps(mod))
                for owner, entries in mod.registrations:
                    registered.setdefault(owner, []).extend(entries)
                    for module, attr in entries if owner in tables_read else []:
                        reach_entry(module, attr)
                for name in wanted & mod.defs.keys():
                    enqueue_defs(mod, name, methods_only=True)
                for cls in mod.bases:
                    for base_mod, base_cls, method in self_calls:
                        if (base_mod, base_cls) in self.ancestors(mod.name, cls):
                            enqueue_defs(mod, method, cls, any_class=False)

        def enqueue_defs(
            mod: _Module, name: str, cls: str | None = None, any_class: bool = True, methods_only: bool = False
        ) -> None:
            for owner, node in mod.defs.get(name, []):
                if (not any_class and owner != cls) or (methods_only and owner is None):
                    continue
                if isinstance(node, ast.ClassDef):
                    for init in ("__init__", "__post_init__"):
                        enqueue_defs(mod, init, node.name, any_class=False)
                    continue
                if id(node) not in seen:
                    seen.add(id(node))
                    queue.append((mod, owner, node))

        def want(name: str) -> None:
            if name in wanted:
                return
            wanted.add(name)
            for mod_name in list(pool):
                enqueue_defs(self._modules[mod_name], name, methods_only=True)

        # the entry: a function of the entry module, or a name it imports (``handler``)
        if entry.name in self._modules and self._module_path(entry.name) is not None:
            add_module(entry.name)
        for dep in self._module_deps(entry):
            add_module(dep)
        for entry_name in entry_names:
            cls, _, func = entry_name.rpartition(".")
            if func in entry.defs:
                enqueue_defs(entry, func, cls or None, any_class=not cls)
            elif entry_name in entry.imports:
                target, attr = entry.imports[entry_name]
                add_module(target)
                mod = self._modules.get(target)
                if mod is None or attr is None or attr not in mod.defs:
                    result.problems.append(f"{label}: cannot resolve {entry_name} -> {target}.{attr}")
                    return result
                enqueue_defs(mod, attr)
            else:
                result.problems.append(f"{label}: no function or import named {entry_name!r}")
                return result

        def self_call(mod: _Module, cls: str, method: str) -> None:
            """``self.method`` inside ``cls``: its own, an inherited and every overriding definition."""
            enqueue_defs(mod, method, cls, any_class=False)
            for base_mod, base_cls in self.ancestors(mod.name, cls):
                enqueue_defs(self._modules[base_mod], method, base_cls, any_class=False)
            if (mod.name, cls, method) in self_calls:
                return
            self_calls.add((mod.name, cls, method))
            for other in [self._modules[m] for m in pool]:
                for sub in other.bases:
                    if (mod.name, cls) in self.ancestors(other.name, sub):
                        enqueue_defs(other, method, sub, any_class=False)

        def resolve_name(mod: _Module, local_imports: dict[str, tuple[str, str | None]], name: str) -> None:
            """A bare name is lexically scoped: the module's own def, or what the module/function imported.

            A registry table (``PROVIDERS = {"aws": "topocast.providers.aws.provider:provider", ...}``) that reached
            code looks names up in reaches every entry: the configuration picks one at run time.
            """
            if name in mod.registries and mod.name not in tables_read:
                tables_read.add(mod.name)
                for module, attr in registered.get(mod.name, []):
                    reach_entry(module, attr)
            for module, attr in mod.registries.get(name, []):
                reach_entry(module, attr)
            if name not in local_imports and any(owner is None for owner, _ in mod.defs.get(name, [])):
                enqueue_defs(mod, name, None, any_class=False)  # a module-level function or class
                return
            target = local_imports.get(name) or mod.imports.get(name)
            if target is None:
                return  # a builtin, parameter or local variable
            module, attr = target
            add_module(module)
            imported = self._modules.get(module)
            if attr is not None and imported is not None and module in pool:
                enqueue_defs(imported, attr)

        while queue:
            mod, owner, node = queue.pop()
            where = f"{mod.name}:{owner + '.' if owner else ''}{getattr(node, 'name', '?')}"
            result.reached.add(where)
            local_imports = dict(pair for sub in ast.walk(node) for pair in self._imports_of(sub, mod.name))
            for sub in ast.walk(node):
                for _, (target, _attr) in self._imports_of(sub, mod.name):
                    add_module(target)
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    result.strings.add(sub.value)
                elif isinstance(sub, ast.Name):
                    resolve_name(mod, local_imports, sub.id)
                elif isinstance(sub, ast.Attribute):
                    result.attributes.add(sub.attr)
                    base = sub.value.id if isinstance(sub.value, ast.Name) else None
                    alias = (local_imports.get(base) or mod.imports.get(base)) if base else None
                    if base == "self" and owner:
                        self_call(mod, owner, sub.attr)
                    elif alias is not None and alias[1] is None:  # module.function
                        add_module(alias[0])
                        if alias[0] in self._modules:
                            enqueue_defs(self._modules[alias[0]], sub.attr)
                    elif sub.attr not in self.unfollowed:
                        want(sub.attr)  # obj.method: every method of that name
                    self._aws_attribute(sub, mod, where, result)
                if isinstance(sub, ast.Call):
                    self._paginator(sub, mod, where, result)
                    if isinstance(sub.func, ast.Attribute) and sub.func.attr == "require":
                        result.required |= {
                            a.value for a in sub.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                        }
        result.modules = pool
        return result

    # ----- AWS operations -----------------------------------------------------------------------------
    @staticmethod
    def _name(receiver: ast.AST) -> str:
        if isinstance(receiver, ast.Name):
            return receiver.id
        if isinstance(receiver, ast.Attribute):
            return receiver.attr
        return ""

    @classmethod
    def _hint(cls, receiver: ast.AST) -> str | None:
        """The service a receiver's name refers to: ``self.s3`` -> s3, ``eks_client`` -> eks."""
        for token in cls._name(receiver).lower().split("_"):
            if token in AWS_SERVICES:
                return token
        return None

    def _aws_attribute(self, node: ast.Attribute, mod: _Module, where: str, result: ScanResult) -> None:
        ops = operations()
        name = node.attr
        if name == "get_paginator" or (self._name(node.value), name) in NOT_AWS:
            return
        service = self._hint(node.value)
        if service is not None:
            if name in ops[service]:
                _record(result, iam_action(service, ops[service][name]), where)
            return
        if "_" not in name:
            return  # single words (get, list, publish) are too common to mean an API call
        owners = [s for s in AWS_SERVICES if name in ops[s]]
        if len(owners) == 1:
            _record(result, iam_action(owners[0], ops[owners[0]][name]), where)
        elif len(owners) > 1:
            result.problems.append(
                f"{where}: .{name}( is an operation of {', '.join(owners)}; name the client after its service"
            )

    def _paginator(self, call: ast.Call, mod: _Module, where: str, result: ScanResult) -> None:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "get_paginator" and call.args):
            return
        ops = operations()
        arg = call.args[0]
        service = self._hint(func.value)
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            owners = [service] if service else [s for s in AWS_SERVICES if arg.value in ops[s]]
            owners = [s for s in owners if arg.value in ops[s]]
            if len(owners) == 1:
                _record(result, iam_action(owners[0], ops[owners[0]][arg.value]), where)
            else:
                result.problems.append(f"{where}: get_paginator({arg.value!r}) matches services {owners}")
        elif mod.iam_actions:
            for action in mod.iam_actions:
                _record(result, action, where)
        else:
            result.problems.append(
                f"{where}: get_paginator() with a computed name; declare IAM_ACTIONS in {mod.name} "
                "listing the actions it can call"
            )


def _record(result: ScanResult, action: str, where: str) -> None:
    result.actions.setdefault(action, set()).add(where)


def _string_values(node: ast.AST) -> Iterable[str]:
    """String values of a literal dict (its values), set, list or tuple."""
    if isinstance(node, ast.Dict):
        items: list[ast.AST | None] = list(node.values)
    elif isinstance(node, ast.Set | ast.List | ast.Tuple):
        items = list(node.elts)
    elif isinstance(node, ast.Call) and node.args:  # frozenset({...})
        return _string_values(node.args[0])
    else:
        return []
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
