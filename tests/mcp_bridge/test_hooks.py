"""Session hooks: Claude Code's output form, the session.end line, never failing, timing."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from mcp_bridge import contract
from mcp_bridge.config import Config
from mcp_bridge.spool import read_events
from tests.mcp_bridge.stdio import ROOT, bridge_env

BUDGET_SECS = 0.100


def _hook(cfg: Config, *args: str, stdin: bytes = b"", **env: str,
          ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "mcp_bridge", "hook", *args], input=stdin,
                          capture_output=True, env=bridge_env(cfg, **env), cwd=ROOT, timeout=30)


def test_session_start_prints_the_briefing_as_claude_code_hook_json(live: Config) -> None:
    done = _hook(live, "session-start", stdin=b'{"session_id": "s-1", "cwd": "/tmp"}')
    assert done.returncode == 0 and done.stderr == b""
    assert json.loads(done.stdout) == {"hookSpecificOutput": {
        "hookEventName": "SessionStart",
        "additionalContext": "# Fleet briefing\nada holds src/**\n"}}
    plain = _hook(live, "session-start", "--format", "plain")
    assert plain.stdout.decode() == "# Fleet briefing\nada holds src/**\n"


def test_session_start_without_a_cache_still_answers_and_exits_zero(config: Config) -> None:
    done = _hook(config, "session-start")
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert done.returncode == 0 and "no briefing rendered yet" in context


def test_session_end_spools_the_outcome_summary_and_session(config: Config) -> None:
    done = _hook(config, "session-end", "--outcome", "partial", "--summary",
                 "refunds half done; key sk_live_" + "x" * 24,
                 stdin=b'{"session_id": "s-77", "reason": "prompt_input_exit"}')
    assert done.returncode == 0 and done.stdout == b"", done.stderr
    (event,) = read_events(config.spool_dir, config.fleet)
    assert event["kind"] == contract.KIND_SESSION_END and event["session"] == "s-77"
    assert event["payload"]["outcome"] == "partial"
    assert event["payload"]["reason"] == "prompt_input_exit"
    assert "sk_live_" not in event["payload"]["summary"]  # scrubbed before the spool


def test_session_end_takes_the_session_from_the_environment(config: Config) -> None:
    _hook(config, "session-end", CTXLAKE_SESSION_ID="s-env")
    (event,) = read_events(config.spool_dir, config.fleet)
    assert event["session"] == "s-env" and event["payload"]["outcome"] is None


def test_a_hook_never_fails_the_turn(config: Config, tmp_path: Path) -> None:
    no_session = _hook(config, "session-end")
    assert no_session.returncode == 0 and b"no session id" in no_session.stderr
    bad_args = _hook(config, "session-end", "--outcome", "great")
    assert bad_args.returncode == 0 and b"nothing done" in bad_args.stderr
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    unwritable = _hook(config, "session-end", stdin=b'{"session_id": "s"}',
                       CTXLAKE_SPOOL_DIR=str(blocked))
    assert unwritable.returncode == 0 and b"nothing queued" in unwritable.stderr
    garbage = _hook(config, "session-start", stdin=b"\xff not json")
    assert garbage.returncode == 0 and json.loads(garbage.stdout)
    misconfigured = subprocess.run(
        [sys.executable, "-m", "mcp_bridge", "hook", "session-end"], input=b"{}",
        capture_output=True, cwd=ROOT, timeout=30,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("CTXLAKE_")},
             "PYTHONPATH": str(ROOT)})
    assert misconfigured.returncode == 0 and b"CTXLAKE_FLEET_ID" in misconfigured.stderr


def test_hooks_import_neither_the_sdk_nor_anything_heavy(live: Config) -> None:
    code = ("import sys, runpy; sys.argv = ['mcp_bridge', 'hook', 'session-start']\n"
            "try:\n runpy.run_module('mcp_bridge', run_name='__main__', alter_sys=True)\n"
            "except SystemExit: pass\n"
            "heavy = {'mcp', 'numpy', 'onnxruntime', 'tokenizers', 'sqlite3', 'pydantic',"
            " 'http', 'socket', 'asyncio', 'urllib.request'}\n"
            "loaded = {m.split('.')[0] for m in sys.modules} | set(sys.modules)\n"
            "sys.stderr.write(repr(sorted(heavy & loaded)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT,
                          env=bridge_env(live), timeout=30)
    assert done.stderr.decode().endswith("[]"), done.stderr


def _wall(cfg: Config, *args: str, stdin: bytes) -> float:
    started = time.perf_counter()
    done = _hook(cfg, *args, stdin=stdin)
    elapsed = time.perf_counter() - started
    assert done.returncode == 0
    return elapsed


def test_both_hooks_finish_within_100_ms(live: Config) -> None:
    """Wall time of the whole process, interpreter start included (median of 7 runs)."""
    stdin = b'{"session_id": "s-t", "hook_event_name": "SessionStart"}'
    _wall(live, "session-start", stdin=stdin)  # warm the page cache
    start = statistics.median(_wall(live, "session-start", stdin=stdin) for _ in range(7))
    end = statistics.median(_wall(live, "session-end", "--outcome", "success", stdin=stdin)
                            for _ in range(7))
    print(f"hook wall time (median of 7): session-start {start * 1000:.1f} ms, "
          f"session-end {end * 1000:.1f} ms")
    assert start < BUDGET_SECS and end < BUDGET_SECS
