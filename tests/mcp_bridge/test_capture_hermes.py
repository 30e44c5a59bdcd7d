"""Hermes' state.db as a transcript: the capture reads one session of it, and never trusts it.

The tables are the parts of hermes-agent 0.19.0's schema (hermes_state.py, version 22) the
reader uses; the rows are what its loop writes (OpenAI-shaped tool calls, the terminal
tool's JSON answer with `exit_code`)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.capture import hermes, run, transcript
from mcp_bridge.config import Config
from mcp_bridge.contract.spool import read_events
from tests.mcp_bridge.capture_run import hook_env, wait_for_end
from tests.mcp_bridge.stdio import ROOT

SESSION = "20261204_090000_abc123"
SCHEMA = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, cwd TEXT, git_branch TEXT,
                       started_at REAL NOT NULL);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, active INTEGER NOT NULL DEFAULT 1, api_content TEXT);
"""
CHECK = "python3 -m unittest -q test_config"
LESSON = ("Turns out the config tests read `FOO=1` from fixtures.env, so a fresh checkout "
          "needs that file before they run.")


class StateDb:
    """A Hermes state.db with one session; each add returns the row id."""

    def __init__(self, path: Path, cwd: str) -> None:
        self.path, self.t = path, 1_796_374_800.0
        self.db = sqlite3.connect(path)
        self.db.executescript(SCHEMA)
        self.db.execute("INSERT INTO sessions VALUES (?, 'cli', ?, 'main', ?)",
                        (SESSION, cwd, self.t))

    def add(self, role: str, content: Any = None, **cols: Any) -> int:
        self.t += 5
        row = {"session_id": SESSION, "role": role, "content": content, "timestamp": self.t,
               **cols}
        cur = self.db.execute(f"INSERT INTO messages ({', '.join(row)}) VALUES "
                              f"({', '.join('?' * len(row))})", tuple(row.values()))
        self.db.commit()
        return int(cur.lastrowid or 0)

    def call(self, n: int, name: str, args: dict[str, Any], output: dict[str, Any] | str
             ) -> None:
        self.add("assistant", "", tool_calls=json.dumps([{
            "id": f"call_{n}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}]))
        self.add("tool", output if isinstance(output, str) else json.dumps(output),
                 tool_call_id=f"call_{n}", tool_name=name)

    def error_fix(self) -> StateDb:
        self.add("user", "The config unit test fails; please fix it.",
                 api_content="[briefing-mark] The config unit test fails; please fix it.")
        self.call(0, "terminal", {"command": CHECK},
                  {"output": "FileNotFoundError: fixtures.env", "exit_code": 1})
        self.call(1, "write_file", {"path": "fixtures.env", "content": "FOO=1\n"},
                  '{"bytes_written": 6}')
        self.call(2, "terminal", {"command": CHECK}, {"output": "OK", "exit_code": 0})
        self.add("assistant", f"The config test passes now. {LESSON}")
        return self


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "remote", "add", "origin",
                    "git@github.com:acme/shop.git"], check=True)
    return root


def test_a_hermes_session_is_read_into_steps(repo: Path, tmp_path: Path) -> None:
    StateDb(tmp_path / "state.db", str(repo)).error_fix()
    t = transcript.read(tmp_path / "state.db", session=SESSION)
    assert (t.format, t.cwd, t.branch, t.notes) == ("hermes", str(repo), "main", [])
    assert [(s.kind, s.tool, s.failed) for s in t.steps] == [
        ("user", "", None), ("call", "terminal", None), ("result", "terminal", True),
        ("call", "write_file", None), ("result", "write_file", None),
        ("call", "terminal", None), ("result", "terminal", False), ("assistant", "", None)]
    assert t.steps[0].text == "The config unit test fails; please fix it."  # not api_content
    assert (t.steps[3].paths, t.steps[3].text) == (["fixtures.env"], "FOO=1")
    assert t.started_at == "2026-12-04T09:00:00Z"  # the sessions row's


def test_the_capture_spools_a_hermes_session_as_a_claude_code_one(config: Config, repo: Path,
                                                                   tmp_path: Path) -> None:
    StateDb(tmp_path / "state.db", str(repo)).error_fix()
    done = run.capture(config, path=str(tmp_path / "state.db"), session=SESSION)
    *proposed, end = read_events(config.spool_dir, config.fleet)
    assert done["format"] == "hermes"
    assert (end["kind"], end["session"], end["payload"]["outcome"]) == (
        "session.end", SESSION, "success")
    assert end["payload"]["repo"] == "git@github.com:acme/shop.git"
    (lesson,) = [e["payload"] for e in proposed]
    assert lesson["claim"] == LESSON
    with sqlite3.connect(tmp_path / "state.db") as db:
        ids = {str(r[0]) for r in db.execute("SELECT id FROM messages")}
    assert {c["message_id"] for c in lesson["evidence"]} <= ids


def test_hostile_rows_cost_only_themselves(repo: Path, tmp_path: Path) -> None:
    """NUL bytes, invalid UTF-8, a 20 MB row, a tool-call list past the cap, junk JSON."""
    db = StateDb(tmp_path / "state.db", str(repo))
    db.add("user", "fix\x00 it\x00")
    db.db.execute("INSERT INTO messages (session_id, role, content, timestamp) VALUES "
                  "(?, 'assistant', CAST(x'6f6bfffe21' AS TEXT), 1)", (SESSION,))
    db.add("tool", "x" * (20 << 20), tool_call_id="c9")
    db.add("assistant", "", tool_calls="[" + "{}," * (hermes.MAX_CALLS_CHARS // 3) + "{}]")
    db.add("assistant", "", tool_calls="not json")
    db.add("assistant", "\x00json:[{\"type\": \"text\", \"text\": \"parts\"}]")
    db.add("user", "gone", active=0)  # rewound away
    db.add("user", "someone else's", session_id="other")
    db.db.commit()
    t = transcript.read(tmp_path / "state.db", session=SESSION)
    texts = [s.text for s in t.steps]
    assert texts[0] == "fix it" and texts[1] == "ok\ufffd\ufffd!"
    assert len(texts[2]) < transcript.TEXT_KEEP + 20 and "[…]" in texts[2]
    assert texts[3:] == ["parts"]
    assert any("tool calls exceed" in n for n in t.notes), t.notes


@pytest.mark.parametrize("make", ["missing", "text", "foreign", "locked"])
def test_the_hook_spools_nothing_from_a_db_it_cannot_read(make: str, config: Config,
                                                          tmp_path: Path) -> None:
    home = tmp_path / "hermes"
    home.mkdir()
    db = home / "state.db"
    holder = None
    if make == "text":
        db.write_text('{"type": "user"}\n')
    elif make == "foreign":
        sqlite3.connect(db).executescript("CREATE TABLE notes (body TEXT);")
    elif make == "locked":
        StateDb(db, str(tmp_path)).error_fix().db.close()
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
    stdin = json.dumps({"hook_event_name": "on_session_finalize", "session_id": SESSION,
                        "cwd": str(tmp_path), "extra": {"reason": "shutdown"}})
    done = subprocess.run([sys.executable, "-m", "mcp_bridge", "hook", "session-end",
                           "--format", "hermes"], input=stdin.encode(), capture_output=True,
                          env=hook_env(config, HERMES_HOME=str(home)), timeout=60, cwd=ROOT)
    if holder is not None:
        holder.close()
    said = {"missing": b"does not exist", "text": b"is not a sqlite database",
            "foreign": b"messages lacks", "locked": b"locked"}[make]
    assert done.returncode == 0 and said in done.stderr, done.stderr
    assert b"nothing queued" in done.stderr
    assert read_events(config.spool_dir, config.fleet) == []
    assert not (config.home / "logs" / "capture.log").exists()


def test_the_hook_hands_hermes_state_db_to_capture(config: Config, repo: Path,
                                                   tmp_path: Path) -> None:
    StateDb(tmp_path / "state.db", str(repo)).error_fix()
    stdin = json.dumps({"hook_event_name": "on_session_finalize", "session_id": SESSION,
                        "cwd": str(repo), "extra": {"platform": "cli", "reason": "shutdown"}})
    done = subprocess.run([sys.executable, "-m", "mcp_bridge", "hook", "session-end",
                           "--format", "hermes"], input=stdin.encode(), capture_output=True,
                          env=hook_env(config, HERMES_HOME=str(tmp_path)), timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout == b"", done.stderr
    ends = [e for e in wait_for_end(config) if e["kind"] == "session.end"]
    assert [(e["session"], e["payload"]["reason"]) for e in ends] == [(SESSION, "shutdown")]
    assert f"session {SESSION} (hermes)" in (config.home / "logs" / "capture.log").read_text()
