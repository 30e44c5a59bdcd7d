"""The composition root for background work.

`drain_spool` routes each spool event kind to the app that owns it; `render_fleet_cache`
asks each app for its files, then writes the briefing and, last, the manifest. The
django-q2 schedules that keep both running are created here, idempotently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from claims import bridge as claims_bridge
from ctxlake_site import paths
from ctxlake_site.drain import Applier, Drainer, DrainReport
from fleet import bridge as fleet_bridge
from fleet import leases, rendering
from fleet.models import Fleet, Lease
from mcp_bridge import contract

APPLIERS: dict[str, Applier] = {
    contract.KIND_LEASE_CLAIM: fleet_bridge.apply_lease_claim,
    contract.KIND_LEASE_RELEASE: fleet_bridge.apply_lease_release,
    contract.KIND_HANDOFF_CREATE: fleet_bridge.apply_handoff_create,
    contract.KIND_CLAIM_PROPOSED: claims_bridge.apply_claim_proposed,
}

# A drain task keeps polling for this long, then ends; the every-minute schedule starts the
# next one. That is how "every few seconds" works on a scheduler that ticks every 30 s.
FOLLOW_SECS = 50
POLL_SECS = 2.0


def drain_spool(
    fleet: str | None = None, progress: Callable[[DrainReport], None] | None = None
) -> DrainReport:
    return Drainer(paths.spool_dir(), APPLIERS, progress=progress).run(only_fleet=fleet)


def drain_spool_follow(follow_secs: float = FOLLOW_SECS, poll_secs: float = POLL_SECS) -> str:
    """The scheduled task: drain now, then every `poll_secs` until `follow_secs` pass."""
    deadline = time.monotonic() + follow_secs
    total = DrainReport()
    while True:
        report = drain_spool()
        total.applied += report.applied
        total.dead += report.dead
        if time.monotonic() + poll_secs >= deadline:
            return f"drained {total.applied} event(s), {total.dead} dead-lettered"
        time.sleep(poll_secs)


def expire_leases_task() -> str:
    """Release leases past their TTL, then re-render the fleets whose roster changed."""
    fleets = list(Fleet.objects.filter(leases__in=Lease.objects.expired()).distinct())
    expired = leases.expire_leases()
    for fleet in fleets:
        rendering.request_render(fleet)
    return f"expired {expired} lease(s) in {len(fleets)} fleet(s)"


SCHEDULES: list[dict[str, Any]] = [
    {
        "name": "ctxlake.drain_spool",
        "func": "ctxlake_site.workers.drain_spool_follow",
        "schedule_type": "I",
        "minutes": 1,
    },
    {
        "name": "ctxlake.expire_leases",
        "func": "ctxlake_site.workers.expire_leases_task",
        "schedule_type": "I",
        "minutes": 1,
    },
    {
        "name": "ctxlake.render_all",
        "func": "ctxlake_site.workers.render_all_fleets",
        "schedule_type": "I",
        "minutes": 5,
    },
]


def ensure_schedules() -> list[str]:
    """Create or update every periodic job by name; safe to run on every start."""
    from django_q.models import Schedule

    names = []
    for spec in SCHEDULES:
        fields = {k: v for k, v in spec.items() if k != "name"}
        Schedule.objects.update_or_create(name=spec["name"], defaults={**fields, "repeats": -1})
        names.append(spec["name"])
    return names
