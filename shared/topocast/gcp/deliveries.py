"""The GCP parser's instance events and reconciles as cloud-neutral :mod:`topocast.changes` values.

A thin adapter: :func:`topocast.gcp.events.parse_cloud_event` returns GCP-shaped commands; the
discover use case takes neutral ones (a no-op for values that already are).
"""

from __future__ import annotations

from typing import Any

from topocast import changes

__all__ = ["NEUTRAL_TYPES", "neutral"]


#: the neutral types the discover function accepts as they are
NEUTRAL_TYPES = (changes.InstanceChange, changes.Reconcile, changes.Noted, changes.Ignored)


def neutral(cmd: Any) -> Any:
    """``cmd`` with GCP instance changes and reconciles as neutral values; anything else unchanged."""
    from topocast.gcp import events as ev

    if isinstance(cmd, ev.InstanceChange):
        detail = {"instance_id": cmd.instance_id or "", "method": cmd.method, "origin": cmd.origin}
        return changes.InstanceChange(
            f"{cmd.project}/{cmd.zone}/{cmd.instance}", cmd.action, f"gcp.compute/{cmd.method}", cmd.time,
            cmd.event_id, detail={k: v for k, v in detail.items() if v},
        )  # fmt: skip
    if isinstance(cmd, ev.Reconcile):
        return changes.Reconcile(cmd.source, cmd.reason, cmd.cluster, None, cmd.event_id)
    return cmd
