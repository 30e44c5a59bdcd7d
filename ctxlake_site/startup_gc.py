"""What a long-lived server process does once its start-up is done: move the objects that
start-up made out of the cycle collector's way (`gc.freeze`).

A web worker or a task worker holds ~90k objects from its start-up (Django's apps,
models, URL patterns, DRF's serializers: 91k in a gunicorn worker that has loaded the app)
that live as long as the process. Python's collector walks all of them at every full
collection, a few times in a drain of thousands of events: in bench/pipeline_bench.py's
10k-event drain the collector took 104–114 ms of CPU, with those objects frozen 26–38 ms,
and the drain ran 6–10 % faster (its "unfrozen" mode, same run, 2026-12-06). A write's
server CPU under write_cpu_ab.py did not visibly change. Collections also stop writing to
those objects' memory.

A frozen object is still freed when its last reference goes; only a cycle among frozen
objects would stay. Start-up's unreachable cycles are collected before the freeze, and
cycles made after it are collected as before (tests/site/test_startup_gc.py). Stdlib only:
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
