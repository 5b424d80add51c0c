"""``topocast pull --check``: what a run would do, with nothing written and the controller untouched.

The same fetch and verification as a run (:func:`topocast.agents.pull.fetch`), the same refusals (a file that
does not parse, the node-loss guard, a generation older than the installed one), the same validation by a
throwaway slurmctld when ``--validate`` is on, and the same choice of how (the live plan with its share,
power-saving and cost rules, else a reconfigure, or a hold when reconfiguring is forbidden). It only reads:
the source, the installed file, the state file and, for the plan, the controller's version and node states.
It takes no lock and writes no file, so it may run beside the agent at any time.

The outcome is a :class:`~topocast.agents.pull.PullOutcome` whose action is what the run would do
(``would_install``, ``unchanged``, ``skipped``, ``refused``, ``held``) with the run's exit code, and its
``changes`` are the nodes that would be added, removed and moved.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from topocast.agents.pull import (
    PullOutcome,
    PullRefused,
    fetch,
    file_changes,
    node_loss,
    read_state,
    unreadable,
)
from topocast.config import DEFAULT_GUARD_MAX_LOSS
from topocast.errors import TopocastError
from topocast.safeio.files import UnsafePathError, check_destination, read_nofollow
from topocast.safeio.limits import MAX_PUBLISHED_BYTES

__all__ = ["check"]


def check(
    source: str,
    dest: Path | str,
    *,
    reconfigure: bool,
    validate: bool,
    slurm_conf: Path | None,
    state_file: Path | None = None,
    live: bool = False,
    allow_reconfigure: bool = True,
    live_max_share: float | None = None,
    slurm: Any = None,
    pointer_bucket: str | None = None,
    pointer_prefix: str | None = None,
    allow_node_loss: bool = False,
    max_node_loss: float = DEFAULT_GUARD_MAX_LOSS,
    updater: Any = None,
    **_: Any,
) -> PullOutcome:
    """What :func:`topocast.agents.pull.pull` with the same arguments would do now (see the module doc)."""
    import os

    from topocast.slurm.install import announce

    dest = Path(dest)
    announce(f"fetching {source}")
    try:
        pulled = fetch(source, pointer_bucket=pointer_bucket, pointer_prefix=pointer_prefix)
    except PullRefused as exc:
        return PullOutcome(False, "refused", source, dest, None, "", f"{exc}; a run would write nothing")

    def outcome(ok: bool, action: str, detail: str, changes: Any = None, step: str | None = None) -> PullOutcome:
        return PullOutcome(ok, action, source, dest, pulled.generation, pulled.sha256, detail + " (check: nothing "
                           "written)", changes=changes, failed_step=step)  # fmt: skip

    try:
        check_destination(dest)
        installed = read_nofollow(dest, MAX_PUBLISHED_BYTES)
    except UnsafePathError as exc:
        return outcome(False, "refused", str(exc), step="write")
    entry = read_state(state_file).get(os.path.realpath(dest)) if state_file is not None else None
    if entry is not None and entry.get("source") == source:
        was = entry.get("generation")
        if isinstance(was, int) and pulled.generation is not None and pulled.generation < was:
            return outcome(True, "skipped", f"{source} holds generation {pulled.generation}, older than the "
                           f"installed {was}; a run would keep the installed file")  # fmt: skip
    if installed == pulled.content:
        return outcome(True, "unchanged", f"{dest} is already generation {pulled.generation} (sha256 "
                       f"{pulled.sha256[:12]})")  # fmt: skip
    bad = unreadable(pulled.content, source)
    if bad is not None:
        return outcome(False, "refused", bad, step="validate")
    held = node_loss(installed, pulled.content, max_node_loss, allow=allow_node_loss)
    if held is not None:
        return outcome(False, "held", held, step="node-loss")
    changes = file_changes(installed, pulled.content)
    if validate:
        from topocast.slurm.controller import SlurmInstall
        from topocast.slurm.validate import validate_topology_text

        checked = validate_topology_text(pulled.content, slurm_conf, source=f"{dest} (candidate)",
                                         install=slurm or SlurmInstall.find())  # fmt: skip
        if not checked.ok:
            return outcome(False, "refused", f"step validate failed: {'; '.join(checked.errors[:3])}", changes,
                           "validate")  # fmt: skip
    costs = (entry or {}).get("costs")
    how, held_why = _how(pulled.content, installed, dest, reconfigure, live or updater is not None, allow_reconfigure,
                         live_max_share, slurm, slurm_conf, updater, costs)  # fmt: skip
    digest = hashlib.sha256(pulled.content).hexdigest()[:12]
    if held_why is not None:
        return outcome(False, "held", f"would hold generation {pulled.generation} (sha256 {digest}): {held_why}",
                       changes, "plan")  # fmt: skip
    return outcome(True, "would_install", f"would install (sha256 {digest}) by {how}", changes)


def _how(
    content: bytes,
    installed: bytes | None,
    dest: Path,
    reconfigure: bool,
    live: bool,
    allow_reconfigure: bool,
    max_share: float | None,
    slurm: Any,
    slurm_conf: Path | None,
    updater: Any,
    costs: Any,
) -> tuple[str, str | None]:
    """(how a run would apply it, why it would hold instead or None), the run's own rules, read-only."""
    if not live:
        return ("writing the file and `scontrol reconfigure`" if reconfigure else "writing the file only"), None
    from topocast.slurm.conffile import slurm_conf_nodes
    from topocast.slurm.controller import SlurmInstall
    from topocast.slurm.live import Costs, ScontrolUpdater, cheaper_plan, plan_live, power_saving_plan

    updater = updater or ScontrolUpdater(slurm or SlurmInstall.find(), slurm_conf, str(dest))
    try:
        defined = slurm_conf_nodes(slurm_conf) if slurm_conf is not None else updater.defined()
        old = installed.decode("utf-8", "replace") if installed is not None else None
        plan = plan_live(old, content.decode("utf-8", "replace"), updater.version(), max_share=max_share,
                         source=str(dest), defined=defined)  # fmt: skip
        plan, _warning = power_saving_plan(plan, updater, allow_reconfigure)
    except TopocastError as exc:
        return f"a plan that could not be made ({exc})", None
    if allow_reconfigure:
        plan = cheaper_plan(plan, Costs.from_dict(costs))
    via = "slurmrestd" if not getattr(updater, "uses_scontrol", True) else "scontrol"
    if plan.live:
        from topocast.model.hostlist import expand

        moved = sum(len(expand(hosts)) for hosts, _ in plan.moves)
        return f"live {via} updates ({len(plan.moves)} call(s) moving {moved} node(s))", None
    if not allow_reconfigure:
        return "", f"it needs a reconfigure ({plan.reason}) and reconfiguring is forbidden"
    return f"a reconfigure through {via} ({plan.reason})", None
