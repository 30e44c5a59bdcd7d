"""The export archive's shape: its file names, format version and line encoding.

One JSON object per line (JSONL), UTF-8, every line ending in a newline, keys sorted, so
the same rows always give the same bytes (and the same sha256 in the manifest).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Final

FORMAT: Final = "ctxlake-fleet-export"
FORMAT_VERSION: Final = 1

MANIFEST: Final = "manifest.json"
FLEET: Final = "fleet.jsonl"
AGENTS: Final = "agents.jsonl"
SESSIONS: Final = "sessions.jsonl"
HANDOFFS: Final = "handoffs.jsonl"
CLAIMS: Final = "claims.jsonl"
EVIDENCE: Final = "evidence.jsonl"
EVENTS: Final = "claim_events.jsonl"
VECTORS: Final = "vectors.jsonl"
MARKDOWN: Final = "memory.md"

#: The data files in the order they are written, checked and loaded (references point
#: backwards: a session names an agent, evidence names a claim).
DATA_FILES: Final = (FLEET, AGENTS, SESSIONS, HANDOFFS, CLAIMS, EVIDENCE, EVENTS, VECTORS)
#: Every file an archive may hold; anything else in a tar is refused, never extracted.
ALL_FILES: Final = (MANIFEST, *DATA_FILES, MARKDOWN)
#: Files that must be present (vectors are optional: `--with-vectors`).
REQUIRED_FILES: Final = (MANIFEST, FLEET, AGENTS, SESSIONS, HANDOFFS, CLAIMS, EVIDENCE, EVENTS)

#: The longest line the importer reads. A claim line with every field at its limit is
#: under 16 KiB and a vector line under 10 KiB; past this a line is an attack, not data.
MAX_LINE_BYTES: Final = 256 * 1024
#: The largest archive member read (a 100k-claim fleet's events fit well within it).
MAX_FILE_BYTES: Final = 1024 * 1024 * 1024


def encode_line(row: dict[str, Any]) -> bytes:
    """One row as its JSONL line: sorted keys, compact, UTF-8 (not \\u-escaped), newline."""
    return json.dumps(row, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode() + b"\n"


def instant(moment: datetime | None) -> str | None:
    """A time as it is exported: ISO 8601 in UTC with its zone, or None."""
    return None if moment is None else moment.astimezone(UTC).isoformat()


class Refused(Exception):
    """An archive the importer will not write: which file, which line (0: the file as a
    whole) and why. Raised before the first write, so a refusal leaves nothing behind."""

    def __init__(self, file: str, line: int, reason: str) -> None:
        super().__init__(f"{file} line {line}: {reason}" if line else f"{file}: {reason}")
        self.file, self.line, self.reason = file, line, reason
