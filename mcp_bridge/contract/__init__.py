"""The shared contract between the server and the bridge: Django-free, stdlib first.

This package is everything both sides use (import-linter enforces that the server imports
nothing else of mcp_bridge): spool event payloads and their limits (`events`), the
redactor, the sanitiser, attribution rendering, ranking, lease globs (`globs`), the
embedder, the spool writer, atomic files. This module holds the cache and spool file
formats; docs/cache-format.md is the prose version of exactly these names and shapes, and
a change here is a FORMAT_VERSION bump there.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Final

from mcp_bridge.contract import bm25

# Re-exported: readers of the file formats name these as contract.X.
from mcp_bridge.contract.events import (
    CITATION_LIMITS,
    CITATIONS_MAX,
    ID_MAX_CHARS,
    PAYLOAD_KEYS,
)
from mcp_bridge.contract.events import (
    CLAIM_TYPES as CLAIM_TYPES,
)
from mcp_bridge.contract.events import (
    HANDOFF_STATUSES as HANDOFF_STATUSES,
)
from mcp_bridge.contract.events import (
    KIND_CLAIM_FEEDBACK as KIND_CLAIM_FEEDBACK,
)
from mcp_bridge.contract.events import (
    KIND_CLAIM_PROPOSED as KIND_CLAIM_PROPOSED,
)
from mcp_bridge.contract.events import (
    KIND_CLAIM_SERVED as KIND_CLAIM_SERVED,
)
from mcp_bridge.contract.events import (
    KIND_HANDOFF_CREATE as KIND_HANDOFF_CREATE,
)
from mcp_bridge.contract.events import (
    KIND_LEASE_CLAIM as KIND_LEASE_CLAIM,
)
from mcp_bridge.contract.events import (
    KIND_LEASE_RELEASE as KIND_LEASE_RELEASE,
)
from mcp_bridge.contract.events import (
    KIND_SESSION_END as KIND_SESSION_END,
)
from mcp_bridge.contract.events import (
    SESSION_OUTCOMES as SESSION_OUTCOMES,
)

#: CTXLAKE_LOG_LEVEL's values, for the server's settings and the bridge alike.
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

#: Version of the cache files. Readers refuse (with a note) any other value.
FORMAT_VERSION: Final = 1
#: Version of one spool line ("v" field). The drain refuses unknown versions.
SPOOL_VERSION: Final = 1

MANIFEST: Final = "manifest.json"
ROSTER: Final = "roster.json"
HISTORY: Final = "history.json"
HANDOFFS: Final = "handoffs.json"
SNAPSHOT: Final = "snapshot.sqlite"
BRIEFING: Final = "briefing.md"
#: The cache files besides the manifest, in the order a host moves new ones into place
#: (the manifest goes last: a reader that sees it sees the files it lists).
CACHE_FILES: Final = (ROSTER, HISTORY, HANDOFFS, SNAPSHOT, BRIEFING)
#: Cache files a change-feed answer may carry whole for a host that says which ETags it
#: holds: the render's small text files (snapshot.sqlite travels by delta). The host checks
#: each body against its listing's ETag before it writes it.
INLINE_FILES: Final = (MANIFEST, ROSTER, HANDOFFS, HISTORY, BRIEFING)
#: A cache file's strong ETag is the first ETAG_HEX hex digits of its sha256, quoted: the
#: same on every web host for one render, and checkable by a host from the bytes.
ETAG_HEX: Final = 40
ETAG_RE: Final = re.compile(rf'"[0-9a-f]{{{ETAG_HEX}}}"')

MEMORY_MODES: Final = ("off", "shadow", "live")
#: What a fleet's session-end capture does (the manifest's `capture`, set per fleet by an
#: operator): nothing; the transcript's record and deterministic candidates; those plus
#: the optional LLM distillation (which also needs an API key on the agent's host).
CAPTURE_OFF: Final = "off"
CAPTURE_CANDIDATES: Final = "candidates"
CAPTURE_LLM: Final = "candidates+llm"
CAPTURE_MODES: Final = (CAPTURE_OFF, CAPTURE_CANDIDATES, CAPTURE_LLM)
#: Candidates a session's capture proposes at most: the fleet's setting (`capture_max` in
#: the manifest), within these bounds; a queue of a few good proposals is read.
CAPTURE_MAX_DEFAULT: Final = 3
CAPTURE_MAX_LIMIT: Final = 10
CLAIM_SCOPES: Final = ("agent", "fleet")
SOURCE_TRUST: Final = ("operator", "agent", "ingested")
TIMELINE_KINDS: Final = (
    "proposed", "corroborated", "promoted", "rejected", "contested", "retracted", "edited",
    "superseded", "session",
)

#: Spool event kinds (each payload's contract is in `events`).
SPOOL_KINDS: Final = tuple(PAYLOAD_KEYS)

#: Spool layout: <spool>/mcp/<fleet>.ndjson is appended to; rotated files are renamed to
#: <fleet>.<YYYYMMDDTHHMMSS.ffffffZ>[-n].ndjson, which sort by name in write order.
SPOOL_SUBDIR: Final = "mcp"
SPOOL_SUFFIX: Final = ".ndjson"
SPOOL_LOCK_SUFFIX: Final = ".lock"

#: Fleet ids name directories and spool files, so they are restricted (no dots, no slashes).
FLEET_ID_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")

#: Citation keys memory_propose accepts; anything else is refused, not dropped.
CITATION_REQUIRED: Final = ("session_id", "message_id")
CITATION_OPTIONAL: Final = tuple(k for k in CITATION_LIMITS if k not in CITATION_REQUIRED)
MAX_CITATIONS: Final = CITATIONS_MAX

#: snapshot.sqlite DDL, in the order the renderer creates it. The bridge opens it read-only.
SNAPSHOT_DDL: Final = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE claims (
        rowid INTEGER PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        text TEXT NOT NULL,
        type TEXT NOT NULL,
        subject TEXT NOT NULL,
        scope TEXT NOT NULL,
        status TEXT NOT NULL,
        confidence REAL NOT NULL,
        contested INTEGER NOT NULL DEFAULT 0,
        independent_sessions INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        promoted_at TEXT,
        valid_until TEXT,
        superseded_by TEXT,
        stale INTEGER NOT NULL DEFAULT 0,
        staleness REAL NOT NULL DEFAULT 0,
        evidence_paths TEXT NOT NULL DEFAULT '[]',
        repos TEXT NOT NULL DEFAULT '[]',
        why TEXT NOT NULL DEFAULT '',
        stale_since TEXT NOT NULL DEFAULT '',
        conflicts TEXT NOT NULL DEFAULT '[]'
    )""",
    "CREATE INDEX claims_subject ON claims (subject)",
    f"""CREATE VIRTUAL TABLE claims_fts USING fts5(
        {", ".join(bm25.COLUMNS)}, content='claims', content_rowid='rowid',
        tokenize='{bm25.TOKENIZE}'
    )""",
    "CREATE TABLE embeddings (rowid INTEGER PRIMARY KEY REFERENCES claims (rowid), "
    "vector BLOB NOT NULL)",
    """CREATE TABLE timeline (
        rowid INTEGER PRIMARY KEY,
        subject TEXT NOT NULL,
        at TEXT NOT NULL,
        kind TEXT NOT NULL,
        claim_id TEXT,
        session_id TEXT,
        actor TEXT,
        summary TEXT NOT NULL,
        outcome TEXT
    )""",
    "CREATE INDEX timeline_subject_at ON timeline (subject, at)",
)
#: After inserting claims: INSERT INTO claims_fts(claims_fts) VALUES ('rebuild').
SNAPSHOT_FTS_REBUILD: Final = "INSERT INTO claims_fts(claims_fts) VALUES ('rebuild')"


#: What parse_time reads: ISO 8601 in ASCII and nothing else. Python's fromisoformat alone
#: takes any character as the date/time separator and ignores a trailing NUL.
_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?"
                       r"(?:Z|[+-]\d{2}:?\d{2})?)?", re.ASCII)


def etag_of(sha256_hex: str) -> str:
    """The ETag of a cache file whose content has this sha256 (hex)."""
    return f'"{sha256_hex[:ETAG_HEX]}"'


def parse_time(value: Any) -> dt.datetime | None:
    """A cache timestamp: ISO 8601 date or datetime, "Z" or an offset; naive means UTC."""
    if not isinstance(value, str) or not _ISO_TIME.fullmatch(value):
        return None
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def envelope_problem(event: dict[str, Any], fleet: str, *, fleet_source: str) -> str | None:
    """Why a spool event's envelope breaks this contract, or None; normalises `id` in place.

    The one check of the fields every line carries, for both readers of spool lines: the
    drain (lines in a spool file) and the REST spool upload (lines posted for a fleet).
    Payloads are each kind's own business. `fleet_source` names what `fleet` came from.
    """
    if type(event.get("v")) is not int or event["v"] != SPOOL_VERSION:
        return f"unsupported spool version {event.get('v')!r} (this reader takes {SPOOL_VERSION})"
    from mcp_bridge.contract.ids import canonical_uuid

    try:
        event["id"] = canonical_uuid(event.get("id"))
    except ValueError:
        return "id must be a UUID"
    if event.get("kind") not in SPOOL_KINDS:
        return f"unknown kind {event.get('kind')!r}; one of {', '.join(SPOOL_KINDS)}"
    if event.get("fleet") != fleet:
        return f"fleet {event.get('fleet')!r} does not match {fleet_source}"
    for key, required in (("agent", True), ("session", False)):
        value = event.get(key)
        if value is None and not required:
            continue
        if (not isinstance(value, str) or not 0 < len(value) <= ID_MAX_CHARS
                or not value.isprintable()):
            return (f"{key} must be 1-{ID_MAX_CHARS} printable characters"
                    + ("" if required else " or null"))
    if parse_time(event.get("at")) is None:
        return "at must be an ISO 8601 timestamp"
    if not isinstance(event.get("payload"), dict):
        return "payload must be an object"
    return None
