"""Server processes freeze their start-up objects (ctxlake_site.startup_gc): a gunicorn
worker once it has loaded the app, a task worker when django-q2 spawns it.

Each check runs in a fresh interpreter: freezing is for the rest of a process's life.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> dict[str, object]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "ctxlake_site.settings"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_gunicorn_worker_freezes_once_it_has_loaded_the_app() -> None:
    # gunicorn's own loading of the config `./ctxlake up` passes, then what its worker does
    # after loading the app (Worker.init_process: load_wsgi, then cfg.post_worker_init)
    out = _run("""
        import gc, json, sys
        sys.argv = ["gunicorn", "--config", "python:ctxlake_site.gunicorn_conf",
                    "ctxlake_site.wsgi"]
        from gunicorn.app.wsgiapp import WSGIApplication
        app = WSGIApplication("%(prog)s [OPTIONS] [APP_MODULE]")
        before = gc.get_freeze_count()
        app.wsgi()
        app.cfg.post_worker_init(None)
        print(json.dumps({"before": before, "after": gc.get_freeze_count(),
                          "django": "django.apps" in sys.modules}))
    """)
    assert out["before"] == 0 and out["django"] is True
    assert int(out["after"]) > 10_000  # Django's apps, models and URL patterns among them


def test_a_task_worker_freezes_when_it_is_spawned() -> None:
    out = _run("""
        import gc, json
        import django
        django.setup()
        from django.conf import settings
        settings.Q_CLUSTER["sync"] = True  # the drain kick beside it queues nothing here
        from django_q.signals import post_spawn
        before = gc.get_freeze_count()
        post_spawn.send(sender="django_q", proc_name="Process-1")
        print(json.dumps({"before": before, "after": gc.get_freeze_count()}))
    """)
    assert out["before"] == 0
    assert int(out["after"]) > 10_000


def test_garbage_of_start_up_is_collected_first_and_later_cycles_still_are() -> None:
    out = _run("""
        import gc, json, weakref
        from ctxlake_site.startup_gc import freeze_startup_objects

        class Node:
            pass

        def cycle():
            a, b = Node(), Node()
            a.other, b.other = b, a
            return weakref.ref(a)

        gc.disable()  # nothing collects but what is asked
        early = cycle()  # unreachable already when start-up ends
        frozen = freeze_startup_objects()
        late = cycle()  # made after the freeze
        gc.collect()
        print(json.dumps({"frozen": frozen, "count": gc.get_freeze_count(),
                          "early_gone": early() is None, "late_gone": late() is None}))
    """)
    assert out["frozen"] == out["count"] and int(out["frozen"]) > 0
    assert out["early_gone"] is True  # not frozen alive: collected before the freeze
    assert out["late_gone"] is True  # the collector still finds cycles made afterwards
