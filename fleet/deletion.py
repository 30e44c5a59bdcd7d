"""Deleting a fleet, between two of its renders.

A render publishes rows that point at its fleet (cache heads and artifacts, snapshot
deltas) in its own transaction. Django's delete collects a fleet's rows first and deletes
them after, so a render committing in between left rows pointing at a fleet about to go,
and the delete failed on the foreign key (seen when fleet_scale.py's teardown met a
render). Taking the fleet's render lock first waits for a running render to commit; a
render that starts after finds the fleet gone and publishes nothing
(ctxlake_site.workers.render_fleet). Rendered bodies in an object store are left to
`manage.py collect_artifacts`, which deletes a deleted fleet's objects as orphans.
"""

from __future__ import annotations

import logging

from django.db import transaction

from fleet import locks
from fleet.models import Fleet

log = logging.getLogger(__name__)


def delete_fleet(fleet: Fleet) -> int:
    """Delete `fleet` and every row of it, once no render of it is running; how many rows."""
    with transaction.atomic():
        locks.hold_render_lock(fleet.pk)
        deleted, _ = fleet.delete()
    log.info("fleet %s deleted: %d rows", fleet.slug, deleted)
    return deleted
