"""Read one Hermes Agent session from its state.db into the capture's neutral steps.

Hermes keeps no transcript file: its `on_session_finalize` hook says only the session id and
the cwd, and the messages live in `$HERMES_HOME/state.db` (sqlite, WAL; schema version 22 in
hermes-agent 0.19.0). What this reads of it:

- `messages`: `id` (autoincrement: insertion order, and what a citation names), `session_id`,
  `role` ("user" | "assistant" | "tool" | "system"), `content` (text; structured content is
  JSON behind a "\\x00json:" prefix), `tool_calls` (JSON, OpenAI's
  `[{"id", "function": {"name", "arguments": "<JSON>"}}]`), `tool_call_id`, `timestamp`
  (unix seconds), `active` (0: rewound away, not part of the session any more). A user row's
  `content` is what the user typed: what a pre_llm_call hook added (the briefing) is only in
  its `api_content`, so the briefing is never captured as the user's words.
- `sessions`: `cwd`, `git_branch`, `started_at` of the session's row.

Never written: the database is opened read-only (`mode=ro`), with a short busy timeout, and
every failure (no file, not sqlite, locked, another schema) is a note, never an exception.
Bounded like the JSONL readers: at most MAX_ROWS rows; a long text is cut inside sqlite to
its head and tail (a 100 MB tool output never reaches Python whole); a tool-call list
longer than MAX_CALLS_CHARS is skipped with a note (truncated JSON cannot be parsed).
Stdlib only, like transcript.py.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mcp_bridge.capture.transcript import (
    TEXT_KEEP,
    Step,
    Transcript,
    arguments,
    bounded,
    is_harness_text,
    pair,
    patch_paths,
    written,
)

#: The first 16 bytes of every sqlite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Hermes' marker for JSON-encoded (structured) message content.
JSON_PREFIX = "\x00json:"
MAX_ROWS = 20_000
MAX_CALLS_CHARS = 1 << 20
BUSY_TIMEOUT_SECS = 2.0
#: Columns a messages table must have to be read at all.
REQUIRED = frozenset({"id", "session_id", "role", "content", "timestamp"})
#: Hermes' file tools and where each names the file it writes (terminal runs a command).
EDIT_TOOLS = frozenset({"write_file", "patch"})


def is_sqlite(path: str | Path) -> bool:
    """True when the file starts like a sqlite database (how capture tells state.db apart
    from a JSONL transcript)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def read(path: str | Path, session: str) -> Transcript:
    """The session's steps from Hermes' state.db at `path`; never raises (notes say why)."""
    try:
        db = _open(path)
    except sqlite3.Error as e:
        return Transcript("unknown", notes=[f"cannot open Hermes' state.db read-only: {e}"])
    try:
        return _read(db, session)
    except sqlite3.Error as e:  # locked past the timeout, corrupt, a schema we do not know
        return Transcript("unknown", notes=[f"cannot read Hermes' state.db: {e}"])
    finally:
        db.close()


class Unreadable(ValueError):
    """The file is not a state.db this module can read; the message says why (for stderr)."""


def has_exchange(path: str | Path, session: str) -> bool:
    """True when the session has a user message and an assistant message (the hook's "did
    something"). Unreadable when the file is missing, not sqlite, locked past the busy
    timeout or of a schema without Hermes' messages table: the hook then spools nothing."""
    if not is_sqlite(path):
        what = "is not a sqlite database" if Path(path).is_file() else "does not exist"
        raise Unreadable(f"Hermes' state.db {path} {what}")
    try:
        db = _open(path)
        try:
            missing = REQUIRED - _columns(db, "messages")
            if missing:
                raise Unreadable(f"{path} is not a Hermes state.db this reader knows "
                                 f"(messages lacks: {', '.join(sorted(missing))})")
            rows = db.execute("SELECT DISTINCT role FROM messages WHERE session_id = ? AND "
                              "role IN ('user', 'assistant')", (session,)).fetchall()
        finally:
            db.close()
    except sqlite3.Error as e:
        raise Unreadable(f"cannot read Hermes' state.db {path}: {e}") from e
    return len(rows) == 2


def _open(path: str | Path) -> sqlite3.Connection:
    uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro"
    db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_SECS)
    # Invalid UTF-8 in a row must cost that text, not the whole read.
    db.text_factory = lambda raw: raw.decode("utf-8", "replace")
    return db


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}


def _read(db: sqlite3.Connection, session: str) -> Transcript:
    have = _columns(db, "messages")
    if not have >= REQUIRED:
        missing = ", ".join(sorted(REQUIRED - have))
        return Transcript("unknown", notes=[
            f"not a Hermes state.db this reader knows (messages lacks: {missing})"])
    t = Transcript("hermes", session_id=session)
    _session_row(db, t, session)
    for row in db.execute(_query(have), (session, MAX_ROWS)):
        t.steps += _steps(row, t.notes)
    count = db.execute("SELECT count(*) FROM messages WHERE session_id = ?",
                       (session,)).fetchone()[0]
    if count > MAX_ROWS:
        t.notes.append(f"session has {count} messages: only the first {MAX_ROWS} were read")
    if count == 0:
        t.notes.append("no messages for this session in Hermes' state.db")
    pair(t.steps)
    return t


def _query(have: set[str]) -> str:
    """The session's rows, oldest first, each text cut to its head and tail inside sqlite."""
    half = TEXT_KEEP // 2
    text = (f"CASE WHEN length(content) > {TEXT_KEEP} THEN substr(content, 1, {half}) || "
            f"char(10) || '[…]' || char(10) || substr(content, -{half}) ELSE content END")
    calls = (f"CASE WHEN length(tool_calls) > {MAX_CALLS_CHARS} THEN '!' ELSE tool_calls END"
             if "tool_calls" in have else "NULL")
    call_id = "tool_call_id" if "tool_call_id" in have else "NULL"
    active = " AND active IS NOT 0" if "active" in have else ""
    return (f"SELECT id, role, {text}, {calls}, {call_id}, timestamp FROM messages "
            f"WHERE session_id = ?{active} ORDER BY id LIMIT ?")


def _session_row(db: sqlite3.Connection, t: Transcript, session: str) -> None:
    have = _columns(db, "sessions")
    wanted = [c for c in ("cwd", "git_branch", "started_at") if c in have]
    if not wanted:
        return
    row = db.execute(f"SELECT {', '.join(wanted)} FROM sessions WHERE id = ?",
                     (session,)).fetchone()
    found = dict(zip(wanted, row, strict=True)) if row else {}
    t.cwd = _clean(found.get("cwd"))
    t.branch = _clean(found.get("git_branch"))
    t.started_at = _iso(found.get("started_at"))


def _steps(row: tuple[Any, ...], notes: list[str]) -> list[Step]:
    rid, role, content, calls, call_id, stamp = row
    sid, at, text = str(rid), _iso(stamp), _text(content)
    if role == "tool":
        return [_result(sid, at, text, _clean(call_id))]
    out: list[Step] = []
    if role == "user" and text and not is_harness_text(text):
        out.append(Step("user", sid, at, bounded(text)))
    elif role == "assistant":
        if text:
            out.append(Step("assistant", sid, at, bounded(text)))
        if calls == "!":
            notes.append(f"message {sid}: its tool calls exceed {MAX_CALLS_CHARS} characters "
                         "and were skipped")
        else:
            out += [_call(sid, at, c) for c in _json_list(calls)]
    return out


def _call(sid: str, at: str, call: dict[str, Any]) -> Step:
    raw = call.get("function")
    fn: dict[str, Any] = raw if isinstance(raw, dict) else {}
    name = _clean(fn.get("name"))
    args = arguments(fn.get("arguments"))
    step = Step("call", sid, at, tool=name, call_id=_clean(call.get("id")))
    patch = args.get("patch")
    if name == "patch" and isinstance(patch, str) and patch.strip():  # V4A envelope
        step.paths, step.text = patch_paths(patch), bounded(patch)
    elif name in EDIT_TOOLS and isinstance(args.get("path"), str):
        step.paths, step.text = [args["path"]], bounded(written(args))
    elif isinstance(args.get("command"), str):
        step.command = args["command"][:2000]
    return step


def _result(sid: str, at: str, text: str, call_id: str) -> Step:
    """A tool's answer; the terminal tool answers JSON with `output` and `exit_code`."""
    failed: bool | None = None
    if text.startswith("{"):
        try:
            decoded = json.loads(text)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("exit_code"), int):
            failed = decoded["exit_code"] != 0
            text = _clean(decoded.get("output")) or _clean(decoded.get("error"))
    return Step("result", sid, at, bounded(text), call_id=call_id, failed=failed)


def _text(content: Any) -> str:
    """Message text: structured content's text parts, NULs dropped (never valid text)."""
    if isinstance(content, str) and content.startswith(JSON_PREFIX):
        parts = _json_list(content[len(JSON_PREFIX):])
        content = "\n".join(p["text"] for p in parts if isinstance(p.get("text"), str))
    return _clean(content).strip()


def _json_list(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, str) or not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _clean(value: Any) -> str:
    return value.replace("\x00", "") if isinstance(value, str) else ""


def _iso(stamp: Any) -> str:
    if not isinstance(stamp, int | float) or isinstance(stamp, bool):
        return ""
    try:
        return datetime.fromtimestamp(stamp, UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return ""
