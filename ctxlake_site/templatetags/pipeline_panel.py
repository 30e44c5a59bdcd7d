"""`{% pipeline_panel %}`: the admin index's view of the pipeline (see pipeline_status).

Moderators see the fleets they are granted; the spool files of unknown fleets belong to no
fleet, so only superusers see those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import template
from django.db import DatabaseError

from claims.admin_scope import granted_fleets
from ctxlake_site import pipeline_status

register = template.Library()


@register.inclusion_tag("ctxlake_site/pipeline_panel.html", takes_context=True)
def pipeline_panel(context: dict[str, Any]) -> dict[str, Any]:
    user = context["request"].user
    try:
        reading = pipeline_status.overview(fleets=granted_fleets(user))
    except (DatabaseError, OSError) as exc:  # the index still renders; the panel says why
        return {"error": f"{type(exc).__name__}: {exc}"}
    now = reading.checked_at
    rows = [
        {
            "fleet": f.fleet,
            "backlog": f.backlog_lines,
            "backlog_age": pipeline_status.age(f.backlog_oldest, now) if f.backlog_lines else "",
            "dead": f.dead_letters,
            "dead_reason": f.dead_newest_reason or "",
            "rejected": f.rejected,
            "rendered": pipeline_status.age(f.rendered_at, now),
            "changed": pipeline_status.age(f.last_activity, now),
            "behind": f.cache_behind,
            "queued": f.render_queued,
            "drained": pipeline_status.age(f.last_drain, now),
            "problems": f.problems,
        }
        for f in reading.fleets
    ]
    stray = (
        [{"kind": "quarantined", "name": Path(f.path).name, **vars(f)}
         for f in reading.quarantined]
        + [{"kind": "waiting", "name": Path(f.path).name, **vars(f)} for f in reading.waiting]
        if user.is_superuser else []
    )
    return {"rows": rows, "stray": stray, "clusters": reading.clusters,
            "superuser": user.is_superuser}
