"""The composition root for background work.

`drain_spool` routes each spool event kind to the app that owns it; `render_fleet_cache`
asks each app for its files, then writes the briefing and, last, the manifest. The
django-q2 schedules that keep both running are created here, idempotently.
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from claims import contradictions, snapshot_render, snapshot_update, tallies
from claims import spool_apply as claims_apply
from ctxlake_site import briefing, db_health, paths, task_broker, task_results
from ctxlake_site.drain import Applier, Drainer, DrainReport
from fleet import (
    artifact_orphans,
    artifact_store,
    artifacts,
    cache_render,
    change_feed,
    incidents,
    leases,
    locks,
    rendering,
    retention,
    retirement,
    spool_apply,
    webhooks,
)
from fleet.models import Fleet, Lease
from mcp_bridge import contract
from mcp_bridge.contract import atomic, delta, embed, events

# Event kinds applied a run at a time (one statement per kind, not per event); the drain's
# planner (ctxlake_site.drain_plan) decides which events may share a run.
BATCH_APPLIERS: dict[str, spool_apply.BatchApplier] = {
    contract.KIND_LEASE_CLAIM: spool_apply.apply_lease_claims,
    contract.KIND_LEASE_RELEASE: spool_apply.apply_lease_releases,
    contract.KIND_HANDOFF_CREATE: spool_apply.apply_handoff_creates,
    contract.KIND_CLAIM_PROPOSED: claims_apply.apply_claims_proposed,
    contract.KIND_CLAIM_SERVED: claims_apply.apply_claims_served,
}
APPLIERS: dict[str, Applier] = {
    # alone in their drain segment (drain_plan): they move leases and read handoff state
    events.KIND_HANDOFF_PICKUP: spool_apply.apply_handoff_pickup,
    events.KIND_HANDOFF_CLEAR: spool_apply.apply_handoff_clear,
    **{kind: partial(spool_apply.one, batch) for kind, batch in BATCH_APPLIERS.items()},
    contract.KIND_SESSION_END: spool_apply.both(spool_apply.apply_session_end,
                                                claims_apply.apply_session_uses),
    contract.KIND_CLAIM_FEEDBACK: claims_apply.apply_claim_feedback,
    # alone in its drain segment too (not in drain_plan's APPLY_ORDER): rare, and it reads
    # the holder's open session, which a session.end beside it may close
    events.KIND_LEASE_INTRUSION: spool_apply.apply_lease_intrusion,
    events.KIND_INCIDENT_TOLD: spool_apply.apply_incident_told,
}

# A drain task keeps polling for this long, then ends; the every-minute schedule starts the
# next one. That is how "every few seconds" works on a scheduler that ticks every 30 s.
FOLLOW_SECS = 50
POLL_SECS = 2.0
#: How long a render may wait for a worker before a follower hands its own over; between
#: its polls, a follower looks this often. A free worker's broker takes a render within a
#: poll of its own (django-q2's ORM broker: 0.2 s), so a render older than this is stuck.
HANDOVER_SECS = 0.5


def drain_spool(
    fleet: str | None = None, progress: Callable[[DrainReport], None] | None = None
) -> DrainReport:
    return Drainer(
        paths.spool_dir(), APPLIERS, batch_appliers=BATCH_APPLIERS, progress=progress
    ).run(only_fleet=fleet)


def drain_spool_follow(
    follow_secs: float = FOLLOW_SECS, poll_secs: float = POLL_SECS, *, chain: bool = True
) -> str:
    """The drain task: drain now, then every `poll_secs` until `follow_secs` pass; then
    enqueue its successor, so the spool is polled without the gaps of the schedule's ticks
    (with the ORM broker nothing was drained for 11-13 s of every minute).

    One follower per spool directory per host: a second one (an overlapping schedule run,
    the kick at start-up, another cluster on this host) returns at once and starts no
    successor, so there is one chain; the every-minute schedule restarts it if a killed
    worker broke it. Drains stay safe to overlap — event ids make that so — this only
    saves a worker from polling twice.

    A follower holds a worker for up to `follow_secs`; a render queued behind it (every
    other worker busy, or one worker, or a restarted cluster whose queue starts with
    followers) would wait that long. So a follower that sees a render waiting longer than
    HANDOVER_SECS (it looks that often between its polls) ends and enqueues its successor
    behind that render: drains go on, and the render runs next.
    """
    with follower_lock() as mine:
        if not mine:
            return "another drain is already following this spool"
        rendering.note_worker_broker()
        deadline = time.monotonic() + follow_secs
        total = DrainReport()
        handed_over = False
        with task_broker.queued_tasks() as queued:
            while True:
                report = drain_spool()
                total.merge(report)
                if time.monotonic() + poll_secs >= deadline:
                    break
                if _render_waits(poll_secs, queued):
                    handed_over = True
                    break
    if chain:  # the next one now, not at the schedule's next tick
        kick_drain()
    note = "; ended early for a waiting render" if handed_over else ""
    return f"drained {total.applied} event(s), {total.dead} dead-lettered{note}"


def _render_waits(poll_secs: float, queued: task_broker.QueuedTasks) -> bool:
    """Sleep out one poll; True as soon as a render has waited HANDOVER_SECS for a worker:
    a render behind a follower waits about that, not a poll. The follower looks HANDOVER_SECS
    after each task queued meanwhile (without the broker's notices: every HANDOVER_SECS).
    An idle follower so wakes once a poll, not twice a second: each wake-up that asks
    Postgres something cost an idle cluster tens of milliseconds of CPU on 2 cores."""
    end = time.monotonic() + poll_secs
    while not rendering.renders_waiting(longer_than=HANDOVER_SECS):
        left = end - time.monotonic()
        if left <= 0 or not queued.wait(left):
            return False
        time.sleep(min(HANDOVER_SECS, max(0.0, end - time.monotonic())))
    return True


def kick_drain() -> None:
    """Enqueue a drain follower (a no-op where one already follows this spool)."""
    if settings.Q_CLUSTER.get("sync"):
        return  # inline tasks would chain forever
    from django_q.tasks import async_task

    async_task("ctxlake_site.workers.drain_spool_follow", task_name="drain follower")


def follower_key() -> int:
    """The advisory lock key for this host and spool directory."""
    return locks.advisory_key(f"ctxlake.drain:{socket.gethostname()}:{paths.spool_dir().resolve()}")


@contextmanager
def follower_lock() -> Iterator[bool]:
    """A Postgres session advisory lock named after this host and spool directory."""
    key = follower_key()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
        mine = bool(cur.fetchone()[0])
    try:
        yield mine
    finally:
        if mine:
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(%s)", [key])


def expire_leases_task() -> str:
    """Release leases past their TTL and retire idle agents (fleet.retirement), then
    re-render the fleets whose roster changed."""
    fleets = list(Fleet.objects.filter(leases__in=Lease.objects.expired()).distinct())
    expired = leases.expire_leases()
    for fleet in fleets:
        rendering.request_render(fleet)
    retired = retirement.retire_idle_agents(timezone.now())
    return f"expired {expired} lease(s) in {len(fleets)} fleet(s); retired {len(retired)} " \
        "idle agent(s)"


def incidents_task() -> str:
    """The every-minute incident job: record overlaps that outlived the fleet's patience
    (fleet.incidents.OVERLAP_PATIENCE), then make the webhook deliveries that are due."""
    found = incidents.scan_overlaps(timezone.now())
    delivered = webhooks.deliver_due()
    return f"{len(found)} new overlap incident(s); {len(delivered)} webhook attempt(s)"


def maintain_db_task() -> str:
    """The daily job: prune by each fleet's retention ages and the task results past a day
    (ctxlake_site.task_results), then vacuum and analyze, and rebuild the search indexes
    bulk deletes bloated (the same steps as maintain_db); with an object store, then
    collect its orphans past a day (the same as collect_artifacts).

    The collection rides on this job rather than a schedule of its own: it is daily upkeep
    of the same kind, an install without a store gets no extra schedule row to run and
    skip, and it never raises (a failed delete or listing is logged and counted), so it
    cannot fail the database's maintenance."""
    pruned = sum(p.done for p in retention.prune())
    results = task_results.prune(commit=True)
    rederived = found = 0
    for fleet in Fleet.objects.all():  # the base rates move; promotions may await a vector
        rederived += tallies.refresh_fleet(fleet)
        found += contradictions.scan_fleet(fleet)
    actions = db_health.maintain(commit=True)
    rebuilt = [a for a in actions if a.startswith("REINDEX")]
    return f"vacuumed {len(actions) - len(rebuilt)} table(s); " + (
        "; ".join(rebuilt) if rebuilt else "no index bloated"
    ) + (f"; pruned {pruned} row(s) past their fleet's retention; re-derived {rederived} "
         f"claim confidence(s); {found} new contradiction(s); {results} task result(s) "
         "past a day") + _collected()


def _collected() -> str:
    """The orphan collection's part of maintain_db_task's summary ("" without a store)."""
    if not artifact_store.configured():
        return ""
    report = artifact_orphans.collect_orphans(older_than=artifact_orphans.GRACE)
    return f"; object store: {report.summary()}" + (
        f" (incomplete: {report.incomplete})" if report.incomplete else "")


@dataclass(frozen=True)
class RenderReport:
    fleet: str
    claims: int
    seconds: float
    snapshot: str = ""  # how the snapshot was rendered: full, delta, unchanged ("" if off)


def render_fleet_cache(fleet_id: int) -> str:
    """The task behind a render request."""
    rendering.render_started(fleet_id)
    fleet = Fleet.objects.filter(pk=fleet_id).first()
    if fleet is None:
        return f"fleet {fleet_id}: gone"
    report = render_fleet(fleet)
    return f"fleet {report.fleet}: {report.claims} claim(s) in {report.seconds:.2f}s"


def render_all_fleets() -> str:
    reports = [render_fleet(fleet) for fleet in Fleet.objects.all()]
    return f"rendered {len(reports)} fleet(s)"


def render_fleet(fleet: Fleet, *, max_tokens: int | None = None) -> RenderReport:
    """Render every cache file of `fleet`: into the database, and into the local cache dir.

    The database is what every web host serves (fleet.artifacts): the files' new heads
    commit with this transaction, all at once. Where a bridge reads this host's cache dir
    (CTXLAKE_LOCAL_CACHE, on by default), each file is also written there atomically, the
    manifest last: a reader that opens the manifest first and the other files after sees
    files at least as new as the manifest says; the bridge never sees a torn file. Renders
    of one fleet run one at a time (a transaction-scoped advisory lock, taken before
    anything is read), so a render that read older rows can never publish after a newer
    one; a worker killed mid-render publishes nothing, and the next render starts over.
    """
    with transaction.atomic():
        locks.hold_render_lock(fleet.pk)
        if not Fleet.objects.filter(pk=fleet.pk).exists():  # deleted while this waited
            return RenderReport(fleet.slug, 0, 0.0, "gone")
        return _render_fleet(fleet, max_tokens=max_tokens)


def _render_fleet(fleet: Fleet, *, max_tokens: int | None) -> RenderReport:
    started = time.monotonic()
    now = timezone.now()
    stamp = cast(str, cache_render.iso(now))  # iso() is None only for None
    with _render_dir(fleet) as root:
        files, claims, how = _render_files(fleet, root, now=now, stamp=stamp,
                                           max_tokens=max_tokens)
        kept = _kept(fleet, files)
        artifacts.publish(fleet, files, at=now, keep=kept)
        if settings.CTXLAKE_LOCAL_CACHE:
            _write_local(root, files, fleet=fleet, kept=kept)
        change_feed.announce(fleet.slug, f"{now:%Y-%m-%dT%H:%M:%S.%fZ}")  # at COMMIT: wakes waiters
    return RenderReport(fleet.slug, claims, time.monotonic() - started, how)


@contextmanager
def _render_dir(fleet: Fleet) -> Iterator[Path]:
    """Where the snapshot is built: the fleet's cache dir when files are written locally
    (it is then published by rename), else a temporary directory."""
    if not settings.CTXLAKE_LOCAL_CACHE:
        with tempfile.TemporaryDirectory(prefix="ctxlake-render-") as tmp:
            yield Path(tmp)
        return
    root = paths.cache_dir() / fleet.slug
    root.mkdir(parents=True, exist_ok=True)
    atomic.remove_stale_temps(root)
    yield root


def _render_files(
    fleet: Fleet, root: Path, *, now: datetime, stamp: str, max_tokens: int | None
) -> tuple[dict[str, bytes], int, str]:
    """Every cache file's bytes (name → bytes, the manifest last; the snapshot left out
    when it is unchanged), the claims count, and how the snapshot was rendered."""
    head = {"format_version": contract.FORMAT_VERSION, "fleet": fleet.slug, "generated_at": stamp}
    roster = cache_render.render_roster(fleet, now=now)
    history = cache_render.render_history(fleet)
    handoffs = cache_render.render_handoffs(fleet)
    files = {
        name: _json({**head, **body})
        for name, body in (
            (contract.ROSTER, roster),
            (contract.HISTORY, history),
            (contract.HANDOFFS, handoffs),
        )
    }
    claims, how = 0, ""
    if contract.SNAPSHOT in artifacts.stranded(fleet):
        # the store was switched off with the snapshot in it: rebuild it whole, into Postgres
        snapshot_update.forget(fleet)
    if fleet.memory_mode != Fleet.MemoryMode.OFF:
        # only the claims changed since the last render are read (claims.snapshot_update);
        # a change of leases or handoffs alone leaves the snapshot as it is
        tmp = atomic.temp_path(root / contract.SNAPSHOT)
        local = root / contract.SNAPSHOT if settings.CTXLAKE_LOCAL_CACHE else None
        snap = snapshot_update.render_snapshot(fleet, tmp, now=now, local=local)
        claims, how = snap.claims, snap.how
        if snap.path is not None:
            files[contract.SNAPSHOT] = snap.path.read_bytes()
            snap.path.unlink()
    else:
        snapshot_update.forget(fleet)
    visible, about_leases = [], []
    if fleet.memory_mode == Fleet.MemoryMode.LIVE:
        leased = [lease["path"] for agent in roster["agents"] for lease in agent["leases"]]
        about_leases = snapshot_render.path_claims(fleet, leased, now=now)
        visible = snapshot_render.briefing_claims(
            fleet, now=now, exclude=[c["id"] for c in about_leases]
        )
    text = briefing.compose(
        fleet.slug,
        roster=roster,
        handoffs=handoffs,
        history=history,
        claims=visible,
        path_claims=about_leases,
        generated_at=stamp,
        max_tokens=max_tokens or briefing.DEFAULT_MAX_TOKENS,
    )
    files[contract.BRIEFING] = text.encode()
    files[contract.MANIFEST] = _json(
        {
            **head,
            "memory_mode": fleet.memory_mode,
            "capture": fleet.capture_mode,
            "capture_max": fleet.capture_max_candidates,
            "embedder": {"name": embed.NAME, "dims": embed.DIMS},
            # the claims the briefing shows (what SessionStart serves), as they fit in it
            "briefing_claims": [c["id"] for c in [*about_leases, *visible] if c["id"] in text],
        }
    )
    return files, claims, how


def _json(value: Any) -> bytes:
    """A cache JSON file's bytes, as mcp_bridge.contract.atomic.write_json writes them."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _kept(fleet: Fleet, files: dict[str, bytes]) -> tuple[str, ...]:
    """Files this render left as they were: the snapshot, when memory is on and no claim
    changed (its head stays; nothing was read or rewritten)."""
    on = fleet.memory_mode != Fleet.MemoryMode.OFF
    return (contract.SNAPSHOT,) if on and contract.SNAPSHOT not in files else ()


def _write_local(root: Path, files: dict[str, bytes], *, fleet: Fleet,
                 kept: tuple[str, ...]) -> None:
    """Write the render into this host's cache dir, each file atomically, in `files`' order
    (the manifest last); a snapshot no longer rendered is removed, and a kept one another
    worker host rendered last is brought here from the database."""
    if contract.SNAPSHOT in kept:
        head = artifacts.snapshot_version(fleet)
        if head is not None and delta.version_of(root / contract.SNAPSHOT) != head:
            latest = artifacts.latest(fleet, contract.SNAPSHOT)
            if latest is not None:
                atomic.write_atomic(root / contract.SNAPSHOT, latest[1])
    elif contract.SNAPSHOT not in files:
        (root / contract.SNAPSHOT).unlink(missing_ok=True)
    for name, body in files.items():
        atomic.write_atomic(root / name, body)


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
        "name": "ctxlake.incidents",
        "func": "ctxlake_site.workers.incidents_task",
        "schedule_type": "I",
        "minutes": 1,
    },
    {
        "name": "ctxlake.render_all",
        "func": "ctxlake_site.workers.render_all_fleets",
        "schedule_type": "I",
        "minutes": 5,
    },
    {
        "name": "ctxlake.maintain_db",
        "func": "ctxlake_site.workers.maintain_db_task",
        "schedule_type": "D",
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
