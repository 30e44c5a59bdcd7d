"""What a long-lived server process does once its start-up is done: move the objects that
start-up made out of the cycle collector's way (`gc.freeze`).

A web worker or a task worker holds ~90–120k objects from its imports (Django's apps,
models, URL patterns, the DRF serializers) that live as long as the process. Python's
collector walks all of them at every full collection, and a drain batch or a burst of
REST writes allocates enough to trigger one every few hundred events: in a drain of
bench/pipeline_bench.py's 10k mixed events the collector took 98–107 ms of CPU, of which
the full collections were three quarters; with those objects frozen, 29–40 ms (three
drains each way, 2026-12-06, load ≤ 1). The REST write mix in one process: 146 → 92 ms
of collection over 800 writes. Python's documentation recommends the same for servers
that fork (`gc.freeze`): collections in the process no longer write to those objects'
pages.

Frozen objects are never collected as cycles; those made by start-up and unreachable
already are collected first, and the rest live as long as the process anyway. Stdlib only:
gunicorn's config hook imports it in the worker (ctxlake_site.gunicorn_conf).
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> int:
    """Collect what start-up left unreachable, then freeze every object now tracked;
    returns how many are frozen (gc.get_freeze_count)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
