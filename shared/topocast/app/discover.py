"""The discover use case: a batch of cloud-neutral events in, at most one new graph generation out.

Policies (docs/architecture.md, "Who decides what"):

* ``Noted`` / ``Ignored`` events and changes outside the provider's scope are acknowledged and
  counted; nothing is discovered for them.
* One discovery per batch: incremental for a few instance changes, full for a reconcile, a provider
  without per-node reads, an empty store or more than ``full_scan_threshold`` changes.
* The graph is committed with :func:`topocast.pipeline.store.commit` (re-read and rebuilt when
  another writer moved the store on). A stored graph that cannot be read is **healed**: a full
  discovery replaces it (:meth:`~topocast.pipeline.store.ObjectGraphStore.replace_unreadable`
  restores the damaged generation in place when the content is the same).
* Any failure: ``retry`` - nothing was written, the platform redelivers the whole batch.
* After a full discovery the published nodes it sees gone that an earlier read saw gone too (a
  held publish, the stored graph it replaces, a removal event in its batch) are confirmed, node by
  node (:func:`~topocast.app.publish.confirm_on_reconcile`), and the latest manifest is handed to
  publish; a reconcile hands it on also while a hold stands.
* ``InstanceChange.follow`` (host maintenance, restarts) is **followed** until steady: an instance
  the provider reports ``unsettled`` (starting, stopping, stopped by the host with a restart
  expected) keeps its last place and is re-read after ``follow_interval`` seconds through the
  :class:`~topocast.ports.protocols.Rechecks` port (a ``Recheck`` event back to discover: no sleeping in a
  function), at most ``follow_rechecks`` times. The last re-check is ``final``: an instance that is
  out is removed, one still in transition is kept with a warning (metric ``follow_unsettled_kept``).
  Without a ``Rechecks`` port (or in a full discovery) one read decides.
* Degrade per node, never per cluster: what the provider set aside (``graph.unplaced``: nodes kept
  without topology or left out because their data breaks a rule) is counted (metric
  ``nodes_set_aside``) and logged. Only when the share set aside passes ``set_aside_limit`` (the
  guard's ``TOPOCAST_GUARD_MAX_LOSS``) does the whole discovery fail (:class:`TooManySetAside`):
  ``retry``, nothing is written, the last good graph stays.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from topocast.app import metrics as m
from topocast.app.outcome import Outcome
from topocast.app.publish import confirm_on_reconcile
from topocast.errors import InvalidGraphError, ProviderError
from topocast.model.changes import EventOutcome, Ignored, InstanceChange, Noted, Recheck, Reconcile
from topocast.model.graph import TopologyGraph
from topocast.model.placement import set_aside_count, set_aside_lines
from topocast.pipeline.store import commit
from topocast.ports.protocols import DiscoverPorts, Metrics
from topocast.ports.records import StoredGraph, WriteResult, already_published
from topocast.providers.base import DiscoveryResult, NeedsFullScan, Provider

__all__ = ["TooManySetAside", "check_set_aside", "discover"]

log = logging.getLogger("topocast.app")


class TooManySetAside(ProviderError):
    """More of the cluster was set aside than the guard allows: this discovery is not written."""


def check_set_aside(graph: TopologyGraph, limit: float, metrics: Metrics | None = None) -> None:
    """Count and log what ``graph`` set aside; raise :class:`TooManySetAside` when its share passes ``limit``."""
    aside, seen = set_aside_count(graph)
    if metrics is not None:
        metrics.count(m.NODES_SET_ASIDE, aside)
    if not graph.unplaced:
        return
    sample = set_aside_lines(graph.unplaced, limit=3)
    log.warning("discovery set aside %d of %d node(s): %s", aside, seen, "; ".join(sample))
    if seen and aside > 1 and aside / seen > limit:  # one odd node never holds back a cluster, however small
        raise TooManySetAside(
            f"{aside} of {seen} node(s) set aside ({aside / seen:.0%}, over the {limit:.0%} limit of "
            f"TOPOCAST_GUARD_MAX_LOSS), e.g. {'; '.join(sample)}; nothing written, the last good graph stays"
        )


def _wanted(ports: DiscoverPorts, events: Sequence[EventOutcome]) -> tuple[bool, list[InstanceChange], int]:
    """(reconcile requested, instance changes for this cluster, events acknowledged without work)."""
    reconcile, changes, skipped = False, [], 0
    provider: Provider | None = None
    for ev in events:
        if isinstance(ev, Noted):
            ports.metrics.count(m.NOTED)
            log.info("noted %s: %s", ev.kind, ev.reason)
            skipped += 1
        elif isinstance(ev, Ignored):
            ports.metrics.count(m.IGNORED)
            log.info("ignored %s: %s", ev.kind, ev.reason)
            skipped += 1
        elif isinstance(ev, Reconcile):
            if ev.cluster and ev.cluster != ports.cluster:
                ports.metrics.count(m.IGNORED)
                log.info("reconcile for cluster %s ignored; this function serves %s", ev.cluster, ports.cluster)
                skipped += 1
            else:
                reconcile = True
        elif isinstance(ev, Recheck) and ev.cluster and ev.cluster != ports.cluster:
            ports.metrics.count(m.IGNORED)
            log.info("re-check for cluster %s ignored; this function serves %s", ev.cluster, ports.cluster)
            skipped += 1
        else:
            provider = provider or ports.provider()
            for change in _followed(ports, ev):
                why = provider.scope(change)
                if why:
                    ports.metrics.count(m.IGNORED)
                    log.info("change of %s ignored: %s", change.instance, why)
                    skipped += 1
                else:
                    changes.append(change)
    return reconcile, changes, skipped


def _followed(ports: DiscoverPorts, ev: InstanceChange | Recheck) -> list[InstanceChange]:
    """The instance changes of ``ev``; a followed one is ``final`` when no later re-check may follow."""
    if isinstance(ev, Recheck):
        return ev.changes(final=ports.rechecks is None or ev.attempt >= ports.follow_rechecks)
    if ev.follow and (ports.rechecks is None or ports.follow_rechecks < 1):
        return [replace(ev, final=True)]
    return [ev]


def discover(ports: DiscoverPorts, events: Sequence[EventOutcome]) -> Outcome:
    """Discover what ``events`` ask for and commit it; see the module docstring for the policies."""
    ports.metrics.count(m.EVENTS, sum(not isinstance(ev, Noted | Ignored) for ev in events))
    reconcile, changes, skipped = _wanted(ports, events)
    if not reconcile and not changes:
        return Outcome.done("nothing to discover", acknowledged=skipped)
    try:
        return _run(ports, ports.provider(), changes, reconcile)
    except Exception as exc:  # nothing was written: the whole batch is redelivered
        ports.metrics.count(m.DISCOVER_FAILURES)
        log.warning("discovery failed; the batch will be retried: %s", exc)
        return Outcome.retry(f"discovery failed: {exc}")


def _run(ports: DiscoverPorts, provider: Provider, changes: list[InstanceChange], reconcile: bool) -> Outcome:
    full = reconcile or not provider.incremental or len(changes) > ports.full_scan_threshold
    results: list[tuple[DiscoveryResult, bool]] = []
    earlier: list[TopologyGraph | None] = []  # per build, the stored graph it replaces

    def build(current: StoredGraph | None, *, scan: bool = full) -> TopologyGraph:
        previous = current.graph if current else None
        whole = scan or previous is None
        try:
            if whole or previous is None:
                res = provider.discover_full(previous)
            else:
                res = provider.discover_changes(previous, changes)
        except InvalidGraphError as exc:  # the provider's graph, not the store's: not a reason to heal
            raise ProviderError(str(exc)) from None
        results.append((res, whole))
        earlier.append(previous)
        ports.metrics.count(m.DISCOVER_RUNS)
        ports.metrics.count(m.API_CALLS, sum(res.api_calls.values()))
        check_set_aside(res.graph, ports.set_aside_limit, ports.metrics)  # before anything is written
        return res.graph

    healed = False
    try:
        written = commit(ports.graphs, build)
    except NeedsFullScan as exc:
        log.info("%s; scanning instead", exc)
        written = commit(ports.graphs, lambda cur: build(cur, scan=True))
    except InvalidGraphError as exc:  # the stored latest is unreadable: a full discovery replaces it
        log.warning("stored graph unreadable, a full discovery heals it: %s", exc)
        written = ports.graphs.replace_unreadable(build(None, scan=True))
        ports.metrics.count(m.HEALED)
        healed = True
    result, was_full = results[-1]
    return _after_commit(ports, result, written, was_full, healed, changes, reconcile, earlier[-1])


def _after_commit(
    ports: DiscoverPorts,
    result: DiscoveryResult,
    written: WriteResult,
    full: bool,
    healed: bool,
    changes: list[InstanceChange],
    reconcile: bool = False,
    earlier: TopologyGraph | None = None,
) -> Outcome:
    graph = result.graph
    for w in result.warnings:
        log.warning("discovery: %s", w)
    ports.metrics.count(m.NODES, len(graph.nodes))
    ports.metrics.count(m.NODES_WITHOUT_TOPOLOGY, len(graph.nodes_without_topology()))
    if written.changed:
        ports.metrics.count(m.GENERATIONS)
    log.info(
        "discovered %d node(s) (%d without topology), generation %d%s",
        len(graph.nodes),
        len(graph.nodes_without_topology()),
        written.generation,
        " (new)" if written.changed else " (unchanged)",
        extra={"generation": written.generation, "full_scan": full},
    )
    # idempotent per generation: also re-arms after a retried batch whose first attempt stopped here
    debounce = ports.debouncer.note_change(ports.cluster, written.generation)
    detail: dict[str, Any] = {
        "action": "full scan" if full else "incremental",
        "generation": written.generation,
        "changed": written.changed,
        "healed": healed,
        "nodes": len(graph.nodes),
        "set_aside": set_aside_lines(graph.unplaced, limit=5),
        "api_calls": dict(result.api_calls),
        "warnings": result.warnings[:5],
        "debounce": debounce.reason,
    }
    if graph.notes:  # merged sources disagreeing (providers/overlay.py): placed, reported per node
        detail["notes"] = set_aside_lines(graph.notes, limit=5)
    if any(c.follow for c in changes):
        detail["follow"] = _follow_up(ports, result, changes, full)
    if full:
        hold = confirm_on_reconcile(
            ports.publish_state,
            graph,
            _seen_gone(earlier, changes),
            written.generation,
            max_loss_fraction=ports.set_aside_limit,
        )
        manifest = ports.artifacts.latest_manifest() if hold is not None else None
        if hold is not None and manifest is not None:
            log.warning(
                "the full discovery confirms %d of the %d held node(s) gone; publishing",
                len(hold.confirmed_gone), len(hold.lost),
            )  # fmt: skip
            ports.handoff.request_publish(manifest.generation, "hold confirmed", f"confirmed-{hold.confirmed_at}")
            detail["hold_confirmed"] = hold.generation
            detail["confirmed_gone"] = len(hold.confirmed_gone)
        elif hold is None and reconcile:  # the reconcile, not every full scan (GCP reads every VM each time)
            detail["catch_up_publish"] = _catch_up_publish(ports)
    return Outcome.done(f"generation {written.generation}{' (new)' if written.changed else ''}", **detail)


def _seen_gone(earlier: TopologyGraph | None, changes: list[InstanceChange]) -> list[str] | None:
    """The node names an earlier read kept: the stored graph the full discovery replaced, less the nodes a
    removal event of this batch names (a stop or termination the cloud reported: the event is the other
    read when a reconcile shares the batch). None without a stored graph."""
    if earlier is None:
        return None
    removed = {c.instance for c in changes if c.action == "remove"}
    vm_names = {k.rpartition("/")[2] for k in removed if "/" in k}  # AWS keys are instance IDs, GCP project/zone/name
    return [n.name for n in earlier.nodes if n.id not in removed and n.name not in vm_names]


def _catch_up_publish(ports: DiscoverPorts) -> int | None:
    """A reconcile asks again for the publish of a rendered generation that is not what is published
    (its publish died or was lost, or the guard held it); the generation asked for, or None.

    A standing hold does not stop it: the guard decides again, with what the reconcile confirmed, so
    a hold never keeps a stale map beyond the reconcile that explains it."""
    manifest = ports.artifacts.latest_manifest()
    if manifest is None:
        return None
    if already_published(ports.publish_state.load_published(), manifest):
        return None
    log.warning("generation %d is rendered but not published; asking for its publish again", manifest.generation)
    ports.handoff.request_publish(manifest.generation, "reconcile: never published", f"catch-up-{manifest.generation}")
    return manifest.generation


def _follow_up(
    ports: DiscoverPorts, result: DiscoveryResult, changes: list[InstanceChange], full: bool
) -> dict[str, Any]:
    """Schedule the next re-check of the followed instances that are not steady; decide at the bound."""
    followed = [c for c in changes if c.follow]
    if full:  # a full discovery lists what runs: it decided every followed instance at once
        return {"settled": sorted({c.instance for c in followed}), "by": "full discovery"}
    waiting = set(result.unsettled)
    first: dict[str, InstanceChange] = {}  # per instance, the follow with the fewest re-checks (a new event restarts)
    for c in sorted(followed, key=lambda c: c.attempt):
        first.setdefault(c.instance, c)
    finals = [c for c in first.values() if c.final and c.attempt > 0]
    if finals:
        ports.metrics.count(m.FOLLOW_BOUND_REACHED, len(finals))
    kept = sorted(i for i, c in first.items() if i in waiting and c.final)
    if kept:
        ports.metrics.count(m.FOLLOW_UNSETTLED_KEPT, len(kept))
        log.warning(
            "%d followed instance(s) still not steady at the last re-check; kept at their last place until the "
            "next event or reconcile: %s", len(kept), ", ".join(kept[:10]),
        )  # fmt: skip
    groups: dict[int, list[InstanceChange]] = {}
    for i, c in first.items():
        if i in waiting and not c.final:
            groups.setdefault(c.attempt + 1, []).append(c)
    scheduled: dict[str, str] = {}
    for attempt, group in sorted(groups.items()):
        assert ports.rechecks is not None  # not final: a re-check port exists
        pairs = sorted((c.instance, c.kind) for c in group)
        ids = sorted({c.event_id or "" for c in group})
        dedup = hashlib.sha256(repr((ports.cluster, attempt, pairs, ids)).encode()).hexdigest()[:24]
        scheduled[str(attempt)] = ports.rechecks.schedule(pairs, attempt, ports.follow_interval, dedup)
        ports.metrics.count(m.FOLLOW_RECHECKS, len(pairs))
        log.info(
            "%d followed instance(s) not steady yet; re-check %d of %d in %.0f s: %s", len(pairs), attempt,
            ports.follow_rechecks, ports.follow_interval, ", ".join(i for i, _ in pairs[:10]),
        )  # fmt: skip
    return {
        "settled": sorted(i for i in first if i not in waiting),
        "waiting": sorted(i for i in first if i in waiting and not first[i].final),
        "kept_at_bound": kept,
        "rechecks": scheduled,
    }
