"""`manage.py maintain_db [--commit] [--json] [--batch-size N]`: retention, then vacuum,
analyze, and rebuild bloated search indexes.

Retention first (each fleet's ages, fleet.retention; then the workers' successful task
results past a day, ctxlake_site.task_results), so the VACUUM that follows reclaims what
it freed. Without `--commit` nothing changes: it counts what would be pruned and
names what would run.
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ctxlake_site import db_health, pipeline_status, task_results
from fleet import retention


class Command(BaseCommand):
    help = (
        "Prune each fleet's old Activity, AppliedEvent, DeadLetter rows and sessions' "
        "transcript-derived fields by the fleet's retention ages (claim events are never "
        "pruned), in batches, and the workers' successful task results older than a day; "
        "then VACUUM (ANALYZE) ctxlake's tables and REINDEX "
        "(concurrently) the HNSW/GIN indexes that bulk deletes left bloated. Without "
        "--commit, only report what it would do."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--commit", action="store_true", help="Do it (default: dry run).")
        parser.add_argument("--json", action="store_true", dest="as_json",
                            help="Print one JSON object (progress goes to stderr).")
        parser.add_argument(
            "--batch-size", type=int, default=retention.DEFAULT_BATCH,
            help=f"Rows pruned per transaction (1–{retention.MAX_BATCH}; default "
                 f"{retention.DEFAULT_BATCH}).")

    def handle(self, *args: Any, commit: bool, as_json: bool = False,
               batch_size: int = retention.DEFAULT_BATCH, **options: Any) -> None:
        if not 1 <= batch_size <= retention.MAX_BATCH:
            raise CommandError(f"--batch-size must be 1–{retention.MAX_BATCH}; got "
                               f"{batch_size if abs(batch_size) < 10**12 else 'a huge number'}")
        say = self._progress_to_stderr if as_json else self.stdout.write
        pruned = self._retention(commit=commit, batch=batch_size, say=say)
        results = task_results.prune(commit=commit)
        say(f"task results: {results:,} success row(s) older than a day "
            f"{'pruned' if commit else 'would be pruned'}")
        actions = db_health.maintain(commit=commit, say=say)
        if as_json:
            self.stdout.write(json.dumps({
                "commit": commit,
                "retention": [pipeline_status.jsonable(asdict(p)) for p in pruned],
                "task_results": results,
                "maintenance": actions,
            }))

    def _retention(self, *, commit: bool, batch: int, say: Any) -> list[retention.Pruned]:
        if commit:
            found = retention.prune(batch=batch, say=lambda p: say(
                f"pruning: {p.fleet} {p.kind}: {p.done:,} of {p.matched:,}"))
        else:
            found = retention.next_prune()
        for p in found:
            if p.matched:
                say(f"{'pruned' if commit else 'would prune'}: {_line(p)}")
        total = sum(p.done if commit else p.matched for p in found)
        say(f"retention: {total:,} row(s) {'pruned' if commit else 'past their fleet age'}; "
            "claim events are never pruned")
        return found

    def _progress_to_stderr(self, line: str) -> None:
        self.stderr.write(line)


def _line(p: retention.Pruned) -> str:
    count = p.done or p.matched
    return f"{p.fleet} {p.kind}: {count:,} older than {p.days} day(s)"
