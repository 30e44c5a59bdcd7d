"""Capture, part two: the fleet's capture setting, the optional LLM step, PreCompact, and the
changed paths `git diff` finds.

Real parts: transcripts in Claude Code's format, a real git work tree, the real Spool
writer, the real hook subprocesses and their detached capture processes. The one stand-in
is the external service: an Anthropic Messages API on 127.0.0.1 that records every request
and answers what the test scripts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge import contract
from mcp_bridge.capture import extract, ledger, llm, mode, record, run, transcript
from mcp_bridge.config import Config
from mcp_bridge.contract import atomic
from mcp_bridge.contract.spool import read_events
from tests.capture_log import finished
from tests.mcp_bridge.capture_run import hook_env, wait_for, wait_for_end
from tests.mcp_bridge.stdio import ROOT
from tests.mcp_bridge.transcripts import Claude, error_fix_claude

SECRET = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
KEY = "sk-ant-api03-standin-" + "x" * 20


class Api:
    """The Messages API stand-in: records requests, answers with `reply` (status, body)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.reply: tuple[int, Any] = (200, {})
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                api.requests.append({"path": self.path, "headers": headers, "raw": body,
                                     "body": json.loads(body)})
                status, answer = api.reply
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, claims: Any, *, tokens: tuple[int, int] = (1200, 300)) -> None:
        self.reply = (200, {
            "id": "msg_standin", "type": "message", "role": "assistant", "model": "standin",
            "stop_reason": "tool_use",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": llm.TOOL,
                         "input": {"claims": claims}}],
            "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]}})


@pytest.fixture
def api() -> Iterator[Api]:
    stand_in = Api()
    thread = threading.Thread(target=stand_in.server.serve_forever, daemon=True)
    thread.start()
    yield stand_in
    stand_in.server.shutdown()
    stand_in.server.server_close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    return root


def _manifest(config: Config, capture: Any = contract.CAPTURE_LLM, **extra: Any) -> None:
    config.fleet_cache.mkdir(parents=True, exist_ok=True)
    body = {"format_version": contract.FORMAT_VERSION, "fleet": config.fleet,
            "generated_at": "2026-12-03T10:00:00Z", "memory_mode": "live", **extra}
    if capture is not None:
        body["capture"] = capture
    atomic.write_json(config.fleet_cache / contract.MANIFEST, body)


def _env(api: Api, **extra: str) -> dict[str, str]:
    return {"CTXLAKE_LLM_API_KEY": KEY, "CTXLAKE_LLM_BASE_URL": api.url, **extra}


def _session(repo: Path) -> tuple[Claude, dict[str, str]]:
    """The error→fix session plus a tool result holding a secret; the ids a test cites."""
    c = error_fix_claude(repo)
    ids = {"fail": c.lines[1]["uuid"], "result": c.lines[2]["uuid"],
           "said": c.lines[3]["uuid"]}
    _, ids["secret"] = c.bash("cat .env", f"GITHUB_TOKEN={SECRET}\n")
    return c, ids


def _proposed(config: Config) -> list[dict[str, Any]]:
    return [e["payload"] for e in read_events(config.spool_dir, config.fleet)
            if e["kind"] == "claim.proposed"]


# -- the setting -----------------------------------------------------------------------


@pytest.mark.parametrize(("manifest", "env", "expected"), [
    ("absent", {}, contract.CAPTURE_CANDIDATES),
    (None, {}, contract.CAPTURE_CANDIDATES),  # a manifest from before the setting
    (contract.CAPTURE_OFF, {}, contract.CAPTURE_OFF),
    (contract.CAPTURE_LLM, {}, contract.CAPTURE_LLM),
    (contract.CAPTURE_LLM, {"CTXLAKE_CAPTURE": "off"}, contract.CAPTURE_OFF),
    ("everything", {}, contract.CAPTURE_OFF),  # unknown: the safe reading
    (["candidates"], {}, contract.CAPTURE_OFF),
    ("cand\x00idates", {}, contract.CAPTURE_OFF),
])
def test_the_capture_mode_is_the_fleets_narrowed_by_the_host(
    config: Config, manifest: Any, env: dict[str, str], expected: str,
) -> None:
    if manifest != "absent":
        _manifest(config, manifest)
    assert mode.resolve(config, env).value == expected


def test_a_manifest_for_another_fleet_or_format_is_not_read(config: Config) -> None:
    _manifest(config, contract.CAPTURE_OFF, fleet="other")
    assert mode.resolve(config, {}).value == contract.CAPTURE_CANDIDATES
    _manifest(config, contract.CAPTURE_OFF, format_version=99)
    assert mode.resolve(config, {}).value == contract.CAPTURE_CANDIDATES
    (config.fleet_cache / contract.MANIFEST).write_bytes(b"\xff\xfe{" + b"[" * 100_000)
    assert mode.resolve(config, {}).value == contract.CAPTURE_CANDIDATES


def test_capture_off_for_the_fleet_reads_nothing_and_spools_the_bare_end(
    config: Config, repo: Path, tmp_path: Path,
) -> None:
    _manifest(config, contract.CAPTURE_OFF)
    path = error_fix_claude(repo).write(tmp_path / "t.jsonl")
    done = run.capture(config, path=str(path), session="s-off", env={})
    (end,) = read_events(config.spool_dir, config.fleet)
    assert end["kind"] == "session.end" and done["candidates"] == 0
    assert end["payload"] == {"outcome": None, "summary": None}
    assert done["format"] == "unread" and "capture is off" in done["notes"][0]


def test_the_hook_leaves_an_off_fleets_transcript_alone(config: Config, repo: Path,
                                                        tmp_path: Path) -> None:
    _manifest(config, contract.CAPTURE_OFF)
    path = error_fix_claude(repo).write(tmp_path / "t.jsonl")
    stdin = json.dumps({"session_id": "s-hook-off", "transcript_path": str(path)})
    subprocess.run([sys.executable, "-m", "mcp_bridge", "hook", "session-end"],
                   input=stdin.encode(), env=hook_env(config), capture_output=True,
                   timeout=60, cwd=ROOT, check=True)
    (end,) = read_events(config.spool_dir, config.fleet)  # at once: no capture process
    assert end["payload"] == {"outcome": None, "summary": None, "reason": None}
    assert not (config.home / "logs" / "capture.log").exists()


# -- the LLM step ----------------------------------------------------------------------


def test_the_llm_step_is_off_unless_the_fleet_turns_it_on(config: Config, repo: Path,
                                                         tmp_path: Path, api: Api) -> None:
    _manifest(config, contract.CAPTURE_CANDIDATES)
    c, _ = _session(repo)
    done = run.capture(config, path=str(c.write(tmp_path / "t.jsonl")), session="s1",
                       env=_env(api))
    assert api.requests == [] and done["candidates"] >= 1
    assert {p["extractor"] for p in _proposed(config)} <= {"error_fix", "lesson", "works_here"}


def test_llm_candidates_cite_real_messages_and_are_scrubbed(
    config: Config, repo: Path, tmp_path: Path, api: Api,
) -> None:
    _manifest(config)
    c, ids = _session(repo)
    api.answer([
        {"claim": "Lowercase before collapsing dashes in src/slug.py; mixed case keeps a "
                  "double dash otherwise.", "type": "gotcha", "subject": "src/slug.py",
         "message_ids": [ids["result"], ids["said"]]},
        {"claim": "The deploy token is " + SECRET + " for the staging runner.",
         "type": "fact", "subject": "deploy", "message_ids": [ids["secret"]]},
        {"claim": "An invented fact about the CI cache.", "type": "fact", "subject": "ci",
         "message_ids": ["00000000-dead-beef-0000-000000000000"]},
        {"claim": "No citation at all.", "type": "fact", "subject": "x", "message_ids": []},
        {"claim": "A bad type.", "type": "opinion", "subject": "x", "message_ids": [ids["fail"]]},
    ])
    done = run.capture(config, path=str(c.write(tmp_path / "t.jsonl")), session="s1",
                       env=_env(api))

    (request,) = api.requests
    assert request["path"] == "/v1/messages"
    assert request["headers"]["x-api-key"] == KEY
    assert request["headers"]["anthropic-version"] == llm.API_VERSION
    body = request["body"]
    assert body["tool_choice"] == {"type": "tool", "name": llm.TOOL}
    assert body["max_tokens"] == llm.MAX_OUTPUT_TOKENS
    digest = body["messages"][0]["content"]
    assert f"[{ids['result']}] result (failed):" in digest
    assert SECRET.encode() not in request["raw"], "the digest must be scrubbed before it leaves"

    llm_made = [p for p in _proposed(config) if p["extractor"] == "llm"]
    texts = [p["claim"] for p in llm_made]
    assert len(llm_made) == 2, texts  # the invented citation, the empty one, the bad type: gone
    assert not any(SECRET in json.dumps(p) for p in _proposed(config))
    assert any(t.startswith("The deploy token is [REDACTED") for t in texts), texts
    real = {line["uuid"] for line in c.lines}
    for p in llm_made:
        assert {e["message_id"] for e in p["evidence"]} <= real
    fix = next(p for p in llm_made if p["subject"] == "src/slug.py")
    # excerpts come from the transcript, not from what the model said
    assert [e["message_id"] for e in fix["evidence"]] == [ids["result"], ids["said"]]
    assert "AssertionError: 'a-b' != 'a--b'" in fix["evidence"][0]["excerpt"]
    assert fix["evidence"][1]["excerpt"].startswith("Turns out `slugify` collapses")
    dropped = [n for n in done["notes"] if n.startswith("LLM candidate")]
    assert len(dropped) == 3 and any("not in the transcript" in n for n in dropped)
    assert done["candidates"] <= extract.MAX_CANDIDATES
    assert json.loads(llm.usage_path(config).read_text())["tokens"] == 1500


def test_the_per_session_cap_bounds_what_is_sent(config: Config, repo: Path, tmp_path: Path,
                                                 api: Api) -> None:
    _manifest(config)
    c, _ = _session(repo)
    for n in range(3_000):  # ~5 MB of tool output
        c.bash(f"cat part{n}.log", f"line {n} " + "x" * 1_700)
    api.answer([])
    cap = 6_000
    run.capture(config, path=str(c.write(tmp_path / "big.jsonl")), session="s-big",
                env=_env(api, CTXLAKE_LLM_SESSION_TOKENS=str(cap)))
    (request,) = api.requests
    sent = len(request["raw"].decode())
    assert sent <= (cap - llm.MAX_OUTPUT_TOKENS) * llm.CHARS_PER_TOKEN
    digest = request["body"]["messages"][0]["content"]
    assert "The slug tests fail on main" in digest  # the ask (head) is kept
    assert "part2999.log" in digest  # and the end
    assert "lines of the session left out" in digest


def test_the_monthly_budget_stops_the_step(config: Config, repo: Path, tmp_path: Path,
                                           api: Api) -> None:
    _manifest(config)
    c, _ = _session(repo)
    path = c.write(tmp_path / "t.jsonl")
    month = time.strftime("%Y-%m", time.gmtime())
    llm.usage_path(config).parent.mkdir(parents=True, exist_ok=True)
    llm.usage_path(config).write_text(json.dumps({"month": month, "tokens": 95_000}))
    done = run.capture(config, path=str(path), session="s-budget",
                       env=_env(api, CTXLAKE_LLM_MONTHLY_TOKENS="100000"))
    assert api.requests == []
    assert any("this month's budget is spent (95000 of 100000" in n for n in done["notes"])
    assert done["candidates"] >= 1  # the deterministic candidates still go
    # last month's ledger does not count against this month
    llm.usage_path(config).write_text(json.dumps({"month": "2001-01", "tokens": 10**9}))
    api.answer([])
    run.capture(config, path=str(path), session="s-budget-2",
                env=_env(api, CTXLAKE_LLM_MONTHLY_TOKENS="100000"))
    assert len(api.requests) == 1


@pytest.mark.parametrize("reply", [
    (500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}),
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}),
    (401, b"<html>nope</html>"),
    (200, b"not json at all"),
    (200, b"[" * 5000),
    (200, {"content": "a string"}),
    (200, {"content": [{"type": "tool_use", "name": llm.TOOL, "input": {"claims": "x"}}]}),
    (200, {"content": [{"type": "tool_use", "name": llm.TOOL,
                        "input": {"claims": [{"claim": "\ud800", "type": "fact",
                                              "subject": "s", "message_ids": [1e308]}]}}],
           "usage": {"input_tokens": 10**30, "output_tokens": -5}}),
])
def test_a_bad_answer_costs_only_the_llm_candidates(
    config: Config, repo: Path, tmp_path: Path, api: Api, reply: tuple[int, Any],
) -> None:
    _manifest(config)
    c, _ = _session(repo)
    api.reply = reply
    done = run.capture(config, path=str(c.write(tmp_path / "t.jsonl")), session="s-bad",
                       env=_env(api))
    assert len(api.requests) == 1
    assert done["end"] and done["candidates"] >= 1
    assert {p["extractor"] for p in _proposed(config)} <= {"error_fix", "lesson", "works_here"}
    assert any(n.startswith(("LLM step failed", "the LLM's answer", "LLM candidate",
                             "LLM step:")) for n in done["notes"]), done["notes"]
    assert KEY not in json.dumps(done)
    used = json.loads(llm.usage_path(config).read_text())["tokens"]
    assert 0 <= used <= 10**30  # the reservation is settled, never left at the cap


def test_no_key_or_a_bad_setting_skips_the_step_with_a_note(config: Config, repo: Path,
                                                            tmp_path: Path, api: Api) -> None:
    _manifest(config)
    c, _ = _session(repo)
    path = str(c.write(tmp_path / "t.jsonl"))
    done = run.capture(config, path=path, session="s-nokey", env={})
    assert any("no API key on this host" in n for n in done["notes"])
    for bad in ({"CTXLAKE_LLM_BASE_URL": "file:///etc/passwd"},
                {"CTXLAKE_LLM_SESSION_TOKENS": "1000"},
                {"CTXLAKE_LLM_API_KEY": "sk\x00ant"}):
        done = run.capture(config, path=path, session="s-bad-" + next(iter(bad)),
                           env={**_env(api), **bad})
        assert any(n.startswith("LLM step skipped") for n in done["notes"]), (bad, done)
    assert api.requests == []
    settings, problems = llm.Settings.from_env({**_env(api),
                                                "CTXLAKE_LLM_MONTHLY_TOKENS": "9" * 400})
    assert settings is not None and settings.monthly_tokens == llm.DEFAULT_MONTHLY_TOKENS
    assert "is not a positive integer" in problems[0]


def test_the_hook_runs_the_llm_step_in_the_detached_capture(
    config: Config, repo: Path, tmp_path: Path, api: Api,
) -> None:
    _manifest(config)
    c, ids = _session(repo)
    api.answer([{"claim": "Run the slug tests with -q; they print the diff of slugs.",
                 "type": "procedure", "subject": "tests/test_slug.py",
                 "message_ids": [ids["fail"]]}])
    stdin = json.dumps({"session_id": "s-hook-llm", "cwd": str(repo),
                        "transcript_path": str(c.write(tmp_path / "t.jsonl"))})
    done = subprocess.run([sys.executable, "-m", "mcp_bridge", "hook", "session-end"],
                          input=stdin.encode(), env={**hook_env(config), **_env(api)},
                          capture_output=True, timeout=60, cwd=ROOT)  # a hang's deadline
    assert done.returncode == 0 and done.stderr == b""
    events = wait_for_end(config)
    assert [e["payload"]["extractor"] for e in events if e["kind"] == "claim.proposed"
            ].count("llm") == 1
    log = (config.home / "logs" / "capture.log").read_text()
    assert "capture candidates+llm" in log and "LLM step: 1 candidate(s), 1500 tokens" in log
    assert KEY not in log and SECRET not in log


# -- PreCompact ------------------------------------------------------------------------


def _hook(config: Config, event: str, body: dict[str, Any]) -> None:
    done = subprocess.run([sys.executable, "-m", "mcp_bridge", "hook", event],
                          input=json.dumps(body).encode(), env=hook_env(config),
                          capture_output=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout == b"", done


def test_precompact_proposes_early_and_the_end_does_not_repeat_it(
    config: Config, repo: Path, tmp_path: Path,
) -> None:
    c = error_fix_claude(repo)
    path = c.write(tmp_path / "t.jsonl")
    body = {"session_id": "s-long", "transcript_path": str(path), "cwd": str(repo),
            "hook_event_name": "PreCompact", "trigger": "auto"}
    _hook(config, "pre-compact", body)
    early = wait_for(config, lambda ev: any(e["kind"] == "claim.proposed" for e in ev),
                      "PreCompact proposed nothing")
    assert {e["kind"] for e in early} == {"claim.proposed"}  # no session.end: it goes on
    # its closing line counts as a compaction's, never as the end's (a wait for the end
    # that counted it returned before the end had logged: Codex's compaction test, once)
    assert [finished(config.home, "s-long", phase) for phase in ("compact", "end")] == [1, 0]
    first = [e["payload"]["claim"] for e in early]

    # the session goes on, teaches one more thing, and ends
    c.assistant("Gotcha: the slug cache in .cache/slugs must be cleared after changing "
                "src/slug.py, or old slugs come back.")
    c.write(path)
    _hook(config, "session-end", {**body, "hook_event_name": "SessionEnd",
                                  "reason": "prompt_input_exit"})
    events = wait_for_end(config, captures=2)  # the PreCompact run and the end's
    assert [finished(config.home, "s-long", phase) for phase in ("compact", "end")] == [1, 1]
    claims = [e["payload"]["claim"] for e in events if e["kind"] == "claim.proposed"]
    assert claims[:len(first)] == first
    assert len(claims) == len(set(claims)), "a candidate was proposed twice"
    assert any("slug cache" in t for t in claims[len(first):])
    assert len(claims) <= extract.MAX_CANDIDATES
    assert [e["kind"] for e in events].count("session.end") == 1


def test_precompact_without_a_transcript_or_with_capture_off_does_nothing(
    config: Config, repo: Path, tmp_path: Path,
) -> None:
    _hook(config, "pre-compact", {"session_id": "s-x", "transcript_path": "/nonexistent"})
    _hook(config, "pre-compact", {"session_id": "s-x", "transcript_path": ["\x00"]})
    _manifest(config, contract.CAPTURE_OFF)
    path = error_fix_claude(repo).write(tmp_path / "t.jsonl")
    _hook(config, "pre-compact", {"session_id": "s-x", "transcript_path": str(path)})
    # A capture process opens the log before it is started (in the hook, which has
    # returned): none was, so nothing can be spooled later either.
    assert not (config.home / "logs" / "capture.log").exists()
    assert read_events(config.spool_dir, config.fleet) == []


def test_the_cap_holds_across_precompact_and_the_end(config: Config, repo: Path,
                                                      tmp_path: Path) -> None:
    c = Claude(cwd=str(repo))
    c.user("Tidy the build")
    for n in range(8):
        c.assistant(f"Gotcha: module{n}.py must be imported before settings{n}, or "
                    f"the registry{n} is empty.")
    path = c.write(tmp_path / "t.jsonl")
    first = run.capture(config, path=str(path), session="s-cap", phase="compact", env={})
    assert first["end"] is None and first["candidates"] == extract.MAX_CANDIDATES
    second = run.capture(config, path=str(path), session="s-cap", env={})
    assert second["candidates"] == 0 and second["end"]


# -- changed paths from git ------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def test_git_diff_against_the_start_commit_adds_what_no_edit_tool_named(
    config: Config, repo: Path, tmp_path: Path,
) -> None:
    (repo / "src" / "slug.py").write_text("a\n")
    (repo / "README.md").write_text("r\n")
    (repo / "setup.cfg").write_text("s\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    start = _git(repo, "rev-parse", "HEAD")
    subprocess.run([sys.executable, "-m", "mcp_bridge", "hook", "session-start"],
                   input=json.dumps({"session_id": "s-git", "cwd": str(repo / "src")}).encode(),
                   env=hook_env(config), capture_output=True, timeout=60, cwd=ROOT, check=True)
    assert ledger.take_start(config, "s-git", keep=True) == start

    (repo / "README.md").write_text("changed and committed by a shell command\n")
    _git(repo, "commit", "-q", "-am", "in the session")
    (repo / "setup.cfg").write_text("changed, not committed\n")
    path = error_fix_claude(repo).write(tmp_path / "t.jsonl")  # its Edit names src/slug.py
    run.capture(config, path=str(path), session="s-git", cwd=str(repo), env={})
    (end,) = [e for e in read_events(config.spool_dir, config.fleet)
              if e["kind"] == "session.end"]
    assert end["payload"]["changed_paths"] == ["src/slug.py", "README.md", "setup.cfg"]
    assert ledger.take_start(config, "s-git") is None  # used once, then gone


def test_the_start_commit_is_read_from_gits_files(repo: Path, tmp_path: Path) -> None:
    assert ledger.git_head(repo) is None  # an unborn branch
    (repo / "a").write_text("a")
    _git(repo, "add", "a")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    assert ledger.git_head(repo / "src") == head
    _git(repo, "pack-refs", "--all")
    assert ledger.git_head(repo) == head
    linked = tmp_path / "linked"
    _git(repo, "worktree", "add", "-q", "-b", "side", str(linked))
    assert ledger.git_head(linked) == head
    _git(repo, "checkout", "-q", "--detach")
    assert ledger.git_head(repo) == head
    assert ledger.git_head(tmp_path / "nowhere") is None


def test_no_start_commit_means_no_git_paths(repo: Path, tmp_path: Path) -> None:
    t = transcript.read(error_fix_claude(repo).write(tmp_path / "t.jsonl"))
    assert record.build(t, start=None).changed_paths == ["src/slug.py"]
    assert record.build(t, start="0" * 40).changed_paths == ["src/slug.py"]  # unknown commit


def test_the_help_names_the_llm_steps_real_defaults() -> None:
    from mcp_bridge.config import ENV_HELP

    assert llm.DEFAULT_MODEL in ENV_HELP["CTXLAKE_LLM_MODEL"]
    assert str(llm.DEFAULT_SESSION_TOKENS) in ENV_HELP["CTXLAKE_LLM_SESSION_TOKENS"]
    assert str(llm.DEFAULT_MONTHLY_TOKENS) in ENV_HELP["CTXLAKE_LLM_MONTHLY_TOKENS"]
    assert llm.DEFAULT_BASE_URL in ENV_HELP["CTXLAKE_LLM_BASE_URL"]


def test_a_precompact_capture_after_the_end_proposes_nothing_again(config: Config, repo: Path,
                                                            tmp_path: Path) -> None:
    path = error_fix_claude(repo).write(tmp_path / "t.jsonl")
    end = run.capture(config, path=str(path), session="s-late", env={})
    assert end["end"] and end["candidates"] >= 1
    late = run.capture(config, path=str(path), session="s-late", phase="compact", env={})
    assert late["candidates"] == 0  # everything it finds was proposed at the end
    kinds = [e["kind"] for e in read_events(config.spool_dir, config.fleet)]
    assert kinds.count("claim.proposed") == end["candidates"]


def test_racing_precompact_and_end_captures_propose_each_candidate_once(
    config: Config, repo: Path, tmp_path: Path,
) -> None:
    c = Claude(cwd=str(repo))
    c.user("Tidy the build")
    for n in range(4):
        c.assistant(f"Gotcha: module{n}.py must be imported before settings{n}, or "
                    f"the registry{n} is empty.")
    path = str(c.write(tmp_path / "t.jsonl"))
    env = hook_env(config)
    argv = [sys.executable, "-m", "mcp_bridge", "capture-session", "--transcript", path,
            "--session", "s-race"]
    for _ in range(5):  # the two detached processes, started together, several times
        procs = [subprocess.Popen([*argv, "--phase", "compact"], env=env, cwd=ROOT),
                 subprocess.Popen(argv, env=env, cwd=ROOT)]
        assert [p.wait(60) for p in procs] == [0, 0]
    claims = [e["payload"]["claim"] for e in read_events(config.spool_dir, config.fleet)
              if e["kind"] == "claim.proposed"]
    assert len(claims) == len(set(claims)) == extract.MAX_CANDIDATES  # 4 found, cap held


@pytest.mark.parametrize(("value", "cap"), [
    (None, contract.CAPTURE_MAX_DEFAULT), (1, 1), (0, 0), (contract.CAPTURE_MAX_LIMIT, 10),
    (contract.CAPTURE_MAX_LIMIT + 1, contract.CAPTURE_MAX_DEFAULT),
    (-1, contract.CAPTURE_MAX_DEFAULT), ("2", contract.CAPTURE_MAX_DEFAULT),
    (True, contract.CAPTURE_MAX_DEFAULT), (10**30, contract.CAPTURE_MAX_DEFAULT),
    (1.5, contract.CAPTURE_MAX_DEFAULT), ({"a": [[[1]]]}, contract.CAPTURE_MAX_DEFAULT),
])
def test_the_fleets_cap_comes_from_the_manifest_and_a_bad_one_is_the_default(
    config: Config, value: Any, cap: int) -> None:
    _manifest(config, contract.CAPTURE_CANDIDATES,
              **({} if value is None else {"capture_max": value}))
    assert mode.max_candidates(config) == cap


def test_a_fleet_capped_at_one_gets_its_best_candidate_only(config: Config, repo: Path,
                                                           tmp_path: Path) -> None:
    _manifest(config, contract.CAPTURE_CANDIDATES, capture_max=1)
    c = Claude(cwd=str(repo))
    c.user("Tidy the build. Always run make migrate before the tests.")
    for n in range(3):
        c.assistant(f"Gotcha: module{n}.py must be imported before settings{n}.")
    done = run.capture(config, path=str(c.write(tmp_path / "t.jsonl")), session="s-cap1")
    proposed = [e["payload"]["claim"] for e in read_events(config.spool_dir, config.fleet)
                if e["kind"] == "claim.proposed"]
    assert done["candidates"] == 1 and proposed == ["Always run make migrate before the tests."]
