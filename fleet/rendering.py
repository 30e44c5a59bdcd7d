"""Asking for a fleet's cache to be re-rendered, debounced.

Many changes arrive in bursts (a drain applying a batch, a moderator promoting ten claims).
Each asks for a render; while one is queued and not yet started, further requests are
absorbed by it, and the render picks up everything that changed in between. The pending
marker lives in the shared (database) cache, so this holds across processes and hosts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from fleet.models import Fleet

#: The task that renders a fleet's cache (fleet id → anything). The Site owns rendering and
#: hands its task over at start-up (ctxlake_site.apps), so Fleet asks for renders without
#: naming another app's module; a process that never got it refuses to enqueue.
_render_task: Callable[[int], object] | None = None
# If a queued render dies before it starts, the marker lapses and renders resume.
PENDING_TIMEOUT_SECS = 300
#: A fleet's requested renders (the render task) start at least this far apart. Under a steady
#: stream of writes a render is asked for while the one before it runs, and starts as soon as
#: it ends: renders ran back to back, so the render rate (every file re-rendered, published
#: and pushed), not the writes, set the workers' CPU. The gap bounds that at one render a
#: second; a write waits at most this much longer to be seen, and only while renders follow
#: each other this closely.
RENDER_GAP_SECS = 1.0


def hand_over_render_task(task: Callable[[int], object]) -> None:
    """Set the task a requested render runs (the Site's render_fleet_cache)."""
    global _render_task
    _render_task = task


def broker() -> str:
    """Which django-q2 broker this process enqueues on: "redis" or "orm"."""
    return "redis" if "redis" in settings.Q_CLUSTER else "orm"


def pending_key(fleet_id: int) -> str:
    """The marker is per broker: a process that enqueues on a broker no cluster reads (a
    command run without CTXLAKE_REDIS_URL) must not hold back the workers' own requests."""
    return f"ctxlake:render-pending:{broker()}:{fleet_id}"


WORKER_BROKER_KEY = "ctxlake:worker-broker"


def note_worker_broker() -> None:
    """Workers say which broker they read, for `doctor` to compare with the web's."""
    cache.set(WORKER_BROKER_KEY, broker(), timeout=600)


def broker_mismatch() -> str | None:
    """Why this process's renders would not reach the workers, or None."""
    theirs = cache.get(WORKER_BROKER_KEY)
    if theirs is None or theirs == broker():
        return None
    return (f"this process enqueues on the {broker()} broker but the workers read {theirs}: "
            "set CTXLAKE_REDIS_URL the same way for web, workers and commands")


def on_commit_once(key: str, func: Callable[[], None]) -> None:
    """transaction.on_commit, but at most once per key per transaction.

    A drain batch may ask for the same render (or embedding pass) hundreds of times; each
    callback would cost a cache round trip after COMMIT. Outside a transaction it runs now.
    """
    conn = transaction.get_connection()
    if conn.in_atomic_block and any(
        getattr(callback, "ctxlake_key", None) == key for _, callback, _ in conn.run_on_commit
    ):
        return
    func.ctxlake_key = key  # type: ignore[attr-defined]
    # robust: a failing follow-up is logged, never raised into the write that committed
    transaction.on_commit(func, robust=True)


def request_render(fleet: Fleet) -> None:
    """After the current transaction commits, make sure a render of `fleet` is coming."""
    fleet_id = fleet.pk
    on_commit_once(f"render:{fleet_id}", lambda: _schedule(fleet_id))


def _schedule(fleet_id: int) -> None:
    from django_q.tasks import async_task

    # The render clears the key as it starts, so a change during a render asks again. A
    # marker already there means a render that has not started yet, which will see this
    # committed change. The value is when it was queued: a drain follower hands its worker
    # over to a render that has waited longer than a poll (renders_waiting).
    if mark_pending(pending_key(fleet_id), str(time.time()), PENDING_TIMEOUT_SECS):
        if _render_task is None:
            raise RuntimeError("no render task: the ctxlake_site app hands it over at start-up")
        async_task(_render_task, fleet_id, task_name=f"render fleet {fleet_id}")


def mark_pending(key: str, value: str, timeout: float) -> bool:
    """Set the pending marker `key` unless it is set; True when this call set it (and so
    enqueues the work it stands for).

    cache.add is atomic: of many requests before the work starts, exactly one enqueues it.
    Under load the marker is nearly always there already: one read then, instead of the
    database cache's add (a count, a read and a refused insert in a transaction of its own).
    """
    return cache.get(key) is None and cache.add(key, value, timeout=timeout)


def started_key(fleet_id: int) -> str:
    return f"ctxlake:render-started:{broker()}:{fleet_id}"


def render_started(fleet_id: int, *, sleep: Callable[[float], None] = time.sleep) -> None:
    """The render task calls this before it reads anything: it waits out the fleet's
    RENDER_GAP_SECS, then clears the pending marker (a change from here on asks again) and
    notes when this render started.

    While it waits, the marker stays set, so the writes of that second join this render
    rather than queue another; its value moves to when the render will start, so a drain
    follower does not mistake the wait for a render starved of a worker (renders_waiting).
    In sync mode (tests, one-process commands) there is no stream of renders to space out
    and no worker to hold: no wait.
    """
    key = pending_key(fleet_id)
    now = time.time()
    wait = _queued_at(cache.get(started_key(fleet_id), "0")) + RENDER_GAP_SECS - now
    if wait > 0 and not settings.Q_CLUSTER.get("sync"):
        wait = min(wait, RENDER_GAP_SECS)  # a clock stepped back must not stall renders
        now += wait
        cache.set(key, str(now), timeout=PENDING_TIMEOUT_SECS)
        sleep(wait)
    cache.delete(key)
    cache.set(started_key(fleet_id), str(now), timeout=PENDING_TIMEOUT_SECS)


def renders_waiting(longer_than: float) -> int:
    """How many fleets have a render queued and not started for more than `longer_than`
    seconds: what a long-running task that shares the workers (the drain follower) asks
    before it keeps its worker for another poll."""
    ids = list(Fleet.objects.values_list("pk", flat=True))
    queued = cache.get_many([pending_key(i) for i in ids]).values()
    cutoff = time.time() - longer_than
    return sum(1 for at in queued if _queued_at(at) < cutoff)


def _queued_at(value: object) -> float:
    try:
        return float(str(value))
    except ValueError:  # a marker of an older release ("1"): waiting since who knows
        return 0.0
