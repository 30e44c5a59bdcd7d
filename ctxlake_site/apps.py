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
        # resumes draining at once instead of at the schedule's next tick.
        post_spawn.connect(_kick_drain, dispatch_uid="ctxlake.kick_drain")


def _kick_drain(sender: Any, proc_name: str = "", **_: Any) -> None:
    from ctxlake_site import workers

    workers.kick_drain()
