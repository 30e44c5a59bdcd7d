"""Collect the object store's orphans: objects under CTXLAKE_S3_PREFIX that no row uses.

Orphans come from a render that rolled back after uploading, a delete that failed, a
deleted fleet (its rows go, its objects stay), and bodies a render moved back into
Postgres while the store was switched off. They cost storage, never correctness, so
collecting them is a daily chore, not part of a render:

1. List every object under the prefix (boto3 pages through the listing, 1,000 a page).
2. Leave alone a key that does not parse as `<prefix><fleet id>/<name>/<sha256>`
   ("foreign": not ours to delete) and an object younger than the grace period: an upload
   of a render still in its transaction has no row yet.
3. Skip an object a committed row in the store uses ("kept"), then delete the rest with
   `artifact_store.delete_unless_used`: under the key's advisory lock it checks again, so a
   render uploading the same key meanwhile keeps its object (the grace period is a
   courtesy; the lock is the guarantee).
4. A failing delete is logged (the store named by `artifact_store.describe`, never its
   keys) and counted; a listing that fails ends the run with `incomplete` set. Neither
   raises: the caller decides what a partial run means.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.utils import timezone

from fleet import artifact_store

log = logging.getLogger(__name__)
GRACE = timedelta(days=1)


@dataclass
class Report:
    """What one collection found. In a dry run, `deleted` and `bytes_freed` are what a real
    run would delete and free; `incomplete` says why the listing stopped early ("" if not)."""

    listed: int = 0
    kept: int = 0
    deleted: int = 0
    too_young: int = 0
    foreign: int = 0
    failed: int = 0
    bytes_freed: int = 0
    dry_run: bool = False
    incomplete: str = ""

    @property
    def ok(self) -> bool:
        return not self.failed and not self.incomplete

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return (f"{self.listed} object(s) listed: {verb} {self.deleted} "
                f"({self.bytes_freed} bytes), kept {self.kept} in use, {self.too_young} "
                f"too young, {self.foreign} foreign, {self.failed} failed")


def collect_orphans(
    *, older_than: timedelta = GRACE, now: datetime | None = None, dry_run: bool = False,
    progress: Callable[[Report], None] | None = None, every: int = 1000,
) -> Report:
    """Delete the store's orphans older than `older_than` (see the module's steps); calls
    `progress` with the report so far after every `every` objects. The store must be
    configured (`artifact_store.configured()`)."""
    report = Report(dry_run=dry_run)
    cutoff = (now or timezone.now()) - older_than
    listing = cast(Any, artifact_store.storage()).bucket.objects.filter(
        Prefix=settings.CTXLAKE_S3_PREFIX)
    try:
        for obj in listing:
            report.listed += 1
            _visit(report, obj.key, obj.size, young=obj.last_modified > cutoff)
            if progress is not None and report.listed % every == 0:
                progress(report)
    except artifact_store.failures() as e:
        report.incomplete = f"object store {artifact_store.describe()}: listing failed: {e}"
        log.warning("%s", report.incomplete)
    return report


def _visit(report: Report, where: str, size: int, *, young: bool) -> None:
    """Count one listed object, and delete it if it is an orphan old enough."""
    found = artifact_store.parse_key(where)
    if found is None:
        report.foreign += 1
    elif young:
        report.too_young += 1
    elif artifact_store.in_use(*found):  # the unlocked first look spares most locks
        report.kept += 1
    elif report.dry_run:
        report.deleted += 1
        report.bytes_freed += size
    else:
        _delete(report, where, found, size)


def _delete(report: Report, where: str, found: tuple[int, str, str], size: int) -> None:
    try:
        deleted = artifact_store.delete_unless_used(*found)
    except artifact_store.failures() as e:
        report.failed += 1
        log.warning("object store %s: orphan %s left behind, its delete failed: %s",
                    artifact_store.describe(), where, e)
        return
    if deleted:
        report.deleted += 1
        report.bytes_freed += size
    else:  # a render brought the same bytes back between the two looks
        report.kept += 1
