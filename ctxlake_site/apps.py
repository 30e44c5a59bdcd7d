from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class SiteConfig(AppConfig):
    name = "ctxlake_site"
    verbose_name = "ctxlake"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        from ctxlake_site import workers
        from fleet import rendering

        rendering.hand_over_render_task(workers.render_fleet_cache)

        # A worker that starts (a new cluster, or one the guard respawned after a kill)
        # freezes its start-up objects and resumes draining at once instead of at the
        # schedule's next tick.
        post_spawn.connect(_worker_started, dispatch_uid="ctxlake.worker_started")


def _worker_started(sender: Any, proc_name: str = "", **_: Any) -> None:
    """django-q2's `post_spawn`, in the new worker process (ctxlake_site.startup_gc says
    why it freezes)."""
    from ctxlake_site import workers
    from ctxlake_site.startup_gc import freeze_startup_objects

    freeze_startup_objects()
    workers.kick_drain()
