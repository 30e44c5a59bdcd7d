"""Session hooks: Claude Code's output form, the session.end line, never failing, timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from mcp_bridge import contract
from mcp_bridge.config import Config
from mcp_bridge.contract.spool import Spool, read_events
from tests.capture_log import wait_until_finished
from tests.mcp_bridge.stdio import INIT, ROOT, bridge_env, call, frame


def _hook(cfg: Config, *args: str, stdin: bytes = b"", **env: str,
          ) -> subprocess.CompletedProcess[bytes]:
    env = {"CTXLAKE_HOME": str(cfg.home), **env}  # session files stay in the test's home
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


def test_session_start_for_hermes_briefs_the_first_turn_only(live: Config) -> None:
    """Hermes 0.19's pre_llm_call shell hook: stdin as agent/shell_hooks.py sends it; a
    `{"context"}` answer is added to that turn's user message."""
    def turn(first: bool) -> bytes:
        return json.dumps({"hook_event_name": "pre_llm_call", "session_id": "h-1",
                           "cwd": "/tmp", "extra": {"is_first_turn": first}}).encode()

    done = _hook(live, "session-start", "--format", "hermes", stdin=turn(True))
    assert done.returncode == 0
    assert "Fleet briefing" in json.loads(done.stdout)["context"]
    later = _hook(live, "session-start", "--format", "hermes", stdin=turn(False))
    assert (later.returncode, later.stdout) == (0, b"")


def test_session_start_without_a_cache_still_answers_and_exits_zero(config: Config) -> None:
    done = _hook(config, "session-start")
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert done.returncode == 0 and "no briefing rendered yet" in context


def test_session_end_spools_the_outcome_summary_and_session(config: Config) -> None:
    done = _hook(config, "session-end", "--outcome", "partial", "--summary",
                 "refunds half done; key sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
                 stdin=b'{"session_id": "s-77", "reason": "prompt_input_exit"}')
    assert done.returncode == 0 and done.stdout == b"", done.stderr
    (event,) = read_events(config.spool_dir, config.fleet)
    assert event["kind"] == contract.KIND_SESSION_END and event["session"] == "s-77"
    assert event["payload"]["outcome"] == "partial"
    assert event["payload"]["reason"] == "prompt_input_exit"
    assert "sk_live_" not in event["payload"]["summary"]  # scrubbed before the spool


def test_session_end_takes_the_session_from_the_environment(config: Config) -> None:
    """A session that spooled a write is a session that did something (issue 15: the
    bare SessionEnd of this test used to be recorded; now it needs the write)."""
    Spool(config.spool_dir, fleet=config.fleet, agent=config.agent, session="s-env").append(
        contract.KIND_LEASE_CLAIM, {"paths": ["src/**"], "ttl_secs": 1800, "reason": "x"})
    _hook(config, "session-end", CTXLAKE_SESSION_ID="s-env")
    claim, event = read_events(config.spool_dir, config.fleet)
    assert event["session"] == "s-env" and event["payload"]["outcome"] is None


def test_a_hook_never_fails_the_turn(config: Config, tmp_path: Path) -> None:
    no_session = _hook(config, "session-end")
    assert no_session.returncode == 0 and b"no session id" in no_session.stderr
    bad_args = _hook(config, "session-end", "--outcome", "great")
    assert bad_args.returncode == 0 and b"nothing done" in bad_args.stderr
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    unwritable = _hook(config, "session-end", "--outcome", "success",
                       stdin=b'{"session_id": "s"}', CTXLAKE_SPOOL_DIR=str(blocked))
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


def test_session_end_with_a_non_utf8_summary_writes_nothing_and_says_why(
    config: Config,
) -> None:
    """argv's undecodable byte arrives as a lone surrogate, which Postgres cannot store: the
    spool writer refuses it (it once wrote a line that stopped every later drain pass)."""
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"mcp_bridge", b"hook", b"session-end",
         b"--summary", b"fixed it \xff"],
        input=b'{"session_id": "s-1"}', capture_output=True, env=bridge_env(config), cwd=ROOT,
        timeout=30,
    )
    assert done.returncode == 0
    assert b"lone surrogate" in done.stderr
    assert read_events(config.spool_dir, config.fleet) == []


# -- sessions are real (issue 15) ------------------------------------------------------------

def _bridge_write(cfg: Config, home: Path, *, shell: bool = False) -> list[dict]:
    """Run the real bridge (spawned by this test process, as a runtime spawns it; through
    a shell if `shell`) and make two writes; the spooled events."""
    stdin = INIT + frame(None, "notifications/initialized") + b"".join(
        call(i, "fleet_claim", {"paths": [f"src/{i}/**"], "reason": "x"}) for i in (2, 3))
    env = {k: v for k, v in bridge_env(cfg, CTXLAKE_HOME=str(home)).items()
           if k != "CTXLAKE_SESSION_ID"}
    argv = [sys.executable, "-m", "mcp_bridge"]
    if shell:
        argv = ["sh", "-c", " ".join(argv) + "; true"]
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env, cwd=ROOT,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return [e for e in read_events(cfg.spool_dir, cfg.fleet) if e["kind"] == "lease.claim"]


def test_the_bridge_stamps_writes_with_the_session_its_runtimes_hook_left(
    config: Config, tmp_path: Path,
) -> None:
    """SessionStart runs through a shell (as Claude Code runs hooks); the bridge is spawned
    directly by the same runtime (here: this test process). Both meet at the runtime's pid."""
    home = tmp_path / "home"
    hook = [sys.executable, "-m", "mcp_bridge", "hook", "session-start"]
    done = subprocess.run(["sh", "-c", " ".join(hook) + "; true"], capture_output=True,
                          input=b'{"session_id": "cc-sess-42", "hook_event_name": "SessionStart"}',
                          env=bridge_env(config, CTXLAKE_HOME=str(home)), cwd=ROOT, timeout=30)
    assert done.returncode == 0, done.stderr
    left = home / "sessions" / f"{os.getpid()}.json"
    assert json.loads(left.read_text())["session_id"] == "cc-sess-42"
    assert left.stat().st_mode & 0o777 == 0o600
    events = _bridge_write(config, home)
    assert [e["session"] for e in events] == ["cc-sess-42", "cc-sess-42"]
    through_a_shell = _bridge_write(config, home, shell=True)[2:]
    assert [e["session"] for e in through_a_shell] == ["cc-sess-42", "cc-sess-42"]


def test_a_hook_that_finishes_after_the_bridge_started_still_names_its_session(
    config: Config, tmp_path: Path,
) -> None:
    """Claude Code spawns its MCP servers while SessionStart still runs: the bridge is up
    (it has answered initialize) before the hook leaves its file. Its writes still carry
    the runtime's session, not one generated at start-up."""
    home = tmp_path / "home"
    env = {k: v for k, v in bridge_env(config, CTXLAKE_HOME=str(home)).items()
           if k != "CTXLAKE_SESSION_ID"}
    bridge = subprocess.Popen([sys.executable, "-m", "mcp_bridge"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert bridge.stdin and bridge.stdout
    try:
        bridge.stdin.write(INIT)
        bridge.stdin.flush()
        assert json.loads(bridge.stdout.readline())["id"] == 1  # started, config read
        hook = [sys.executable, "-m", "mcp_bridge", "hook", "session-start"]
        done = subprocess.run(["sh", "-c", " ".join(hook) + "; true"], capture_output=True,
                              input=b'{"session_id": "cc-late-7"}', env=env, cwd=ROOT,
                              timeout=30)
        assert done.returncode == 0, done.stderr
        _out, err = bridge.communicate(
            frame(None, "notifications/initialized")
            + call(2, "fleet_claim", {"paths": ["src/late/**"], "reason": "x"}), timeout=60)
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait()
    assert bridge.returncode == 0, err
    events = [e for e in read_events(config.spool_dir, config.fleet)
              if e["kind"] == "lease.claim"]
    assert [e["session"] for e in events] == ["cc-late-7"]


def test_session_files_of_runtimes_that_are_gone_are_pruned(config: Config,
                                                           tmp_path: Path) -> None:
    home = tmp_path / "home"
    stale = home / "sessions" / "999999999.json"  # beyond pid_max: no such process
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"pid": 999999999, "started": None, "session_id": "old"}))
    _hook(config, "session-start", stdin=b'{"session_id": "new"}', CTXLAKE_HOME=str(home))
    assert not stale.exists()
    assert [p.name for p in stale.parent.iterdir()] == [f"{os.getpid()}.json"]


def test_without_a_runtime_session_each_bridge_process_generates_one(
    config: Config, tmp_path: Path,
) -> None:
    first = _bridge_write(config, tmp_path / "home")
    assert len({e["session"] for e in first}) == 1 and first[0]["session"]
    uuid.UUID(first[0]["session"])
    second = _bridge_write(config, tmp_path / "home")[2:]
    assert second[0]["session"] != first[0]["session"]  # one per process


def test_a_session_file_for_a_reused_pid_is_not_believed(tmp_path: Path) -> None:
    from mcp_bridge.config import resolve_session, session_file

    path = session_file(tmp_path, os.getpid())
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": os.getpid(), "started": "1", "session_id": "old"}))
    session, source = resolve_session({}, tmp_path, ppid=os.getpid())
    assert source == "generated" and session != "old"


def _transcript(tmp_path: Path, *kinds: str) -> str:
    path = tmp_path / "transcript.jsonl"
    lines = [{"type": "summary", "summary": "x"}] + [
        {"type": k, "message": {"role": k, "content": "hi"}, "uuid": f"m{i}"}
        for i, k in enumerate(kinds)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def test_session_end_of_a_session_that_did_nothing_records_nothing(
    config: Config, tmp_path: Path,
) -> None:
    """What `claude mcp list` / `claude mcp get` fire: SessionEnd with no exchange."""
    for transcript in (None, str(tmp_path / "missing.jsonl"), _transcript(tmp_path, "user")):
        stdin = json.dumps({"session_id": "s-list", "reason": "other",
                            "transcript_path": transcript}).encode()
        done = _hook(config, "session-end", stdin=stdin)
        assert done.returncode == 0 and b"nothing recorded" in done.stderr
    assert read_events(config.spool_dir, config.fleet) == []
    assert not (config.spool_dir / "mcp").exists()


def test_session_end_records_a_session_with_an_exchange(config: Config, tmp_path: Path) -> None:
    stdin = json.dumps({"session_id": "s-real", "reason": "prompt_input_exit",
                        "transcript_path": _transcript(tmp_path, "user", "assistant")}).encode()
    assert _hook(config, "session-end", stdin=stdin).returncode == 0
    # the hook hands the transcript to a detached capture process, which spools the one
    # session.end (issue 16): wait for it rather than expect it when the hook returns
    wait_until_finished(config.home, session="s-real")  # it has spooled all it will
    (event,) = read_events(config.spool_dir, config.fleet)
    assert event["session"] == "s-real" and event["kind"] == contract.KIND_SESSION_END
