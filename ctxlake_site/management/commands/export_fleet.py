"""`manage.py export_fleet FLEET --out PATH [--with-vectors]`: a fleet's memory, as files.

Writes JSONL of the fleet's settings, agents, sessions, handoffs, claims, evidence and
every claim event, a manifest (format version, counts, each file's sha256) and memory.md,
the promoted claims for people (ctxlake_site.fleet_export). PATH is a new or empty
directory, or `-` for a tar on standard output (the report then goes to standard error).
No token secret or hash and no password hash is ever read.
"""

from __future__ import annotations

import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError

from ctxlake_site.fleet_export import archive
from fleet.models import Fleet


class Command(BaseCommand):
    help = "Export a fleet (JSONL, manifest.json, memory.md) to a directory, or a tar on -."
    stealth_options = ("binary_stdout",)

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("fleet", help="The fleet's slug.")
        parser.add_argument("--out", required=True,
                            help="A new or empty directory, or - for a tar on standard output.")
        parser.add_argument("--with-vectors", action="store_true",
                            help="Also export the claims' embeddings (vectors.jsonl).")

    def handle(self, *args: Any, fleet: str, out: str, with_vectors: bool,
               **options: Any) -> None:
        found = Fleet.objects.filter(slug=fleet).first()
        if found is None:
            raise CommandError(f"No fleet {fleet!r}.")
        built = archive.build(found, with_vectors=with_vectors)
        if out == "-":
            sink = cast("IO[bytes]", options.get("binary_stdout") or sys.stdout.buffer)
            for chunk in archive.tar_chunks(built):
                sink.write(chunk)
            sink.flush()
            report = self.stderr
        else:
            try:
                archive.write_dir(built, Path(out))
            except OSError as exc:
                raise CommandError(str(exc)) from None
            report = self.stdout
        counts = ", ".join(f"{n} {k}" for k, n in built.manifest["counts"].items())
        report.write(f"Exported {fleet}: {counts} → {out if out != '-' else 'a tar on stdout'}")
