"""Issue 16's capture through the real Codex CLI: `codex exec` → its SessionEnd hook → the spool.

`install --runtime codex` writes ctxlake's hooks into the test world's ~/.codex/hooks.json.
The real `codex exec` then runs one session against the Responses-API stand-in (the model is
the only thing replaced): a unit test fails, the model adds the missing file with Codex's
own apply_patch tool, the test passes, and the model states a lesson. Codex writes its
rollout under ~/.codex/sessions/ and, as `codex exec` ends, fires SessionEnd with that
rollout as `transcript_path` (and `reason` "other"); the installed hook starts the detached
capture, which spools the session's one session.end and its candidate claims. The
candidates' evidence must name items of the rollout Codex wrote (transcript.py's ids).

Hook trust: Codex runs a new or changed hook only once the user has trusted it (the TUI asks
"Hooks need review"); `codex exec` has no prompt, so automation passes
`--dangerously-bypass-hook-trust`, as this test does.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realclients.conftest import Clients, Fleet
from tests.realclients.responses_standin import Patch, Say, Shell, Standin, Step, call_id

pytestmark = pytest.mark.slow

REMOTE = "git@github.com:acme/shop.git"
#: A slug for which Codex offers its freeform apply_patch tool (it picks tools by model).
MODEL = "gpt-5.5"
CHECK = "python3 -m unittest -q test_config"
TEST_FILE = """\
import unittest


class ConfigTest(unittest.TestCase):
    def test_fixture_env(self):
        with open("fixtures.env") as f:
            self.assertIn("FOO=1", f.read())
"""
PATCH = "*** Begin Patch\n*** Add File: fixtures.env\n+FOO=1\n*** End Patch\n"
PROMPT = "The config unit test fails on a fresh checkout; please fix it."
LESSON = ("Turns out the config tests read `FOO=1` from fixtures.env, so a fresh checkout "
          "needs that file before they run.")
FINAL = f"The config test passes now. {LESSON}"
SCRIPT: list[Step] = [Shell(CHECK), Patch(PATCH), Shell(CHECK), Say(FINAL)]
CAPTURE_WAIT_SECS = 30


def rollout_items(path: Path) -> dict[str, tuple[str, str]]:
    """Every id a citation may name in a Codex rollout → (item type, call_id): a response
    item's `id`, else its `call_id`, else `line-<n>` (transcript.py's rule, restated here
    from the file itself)."""
    items: dict[str, tuple[str, str]] = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        entry = json.loads(line) if line.strip() else {}
        payload = entry.get("payload")
        if entry.get("type") == "response_item" and isinstance(payload, dict):
            key = str(payload.get("id") or payload.get("call_id") or f"line-{n}")
            items[key] = (str(payload.get("type")), str(payload.get("call_id") or ""))
    return items


def what_happened(world: Fleet, done: subprocess.CompletedProcess[str] | None = None) -> str:
    """For a failure message: every spooled line, the capture log, and Codex's stderr."""
    lines = [f"{e['kind']} session={e.get('session')} {json.dumps(e.get('payload'))[:300]}"
             for e in world.events()]
    log = world.ctx_home / "logs" / "capture.log"
    return ("spooled:\n  " + ("\n  ".join(lines) or "(nothing)") + "\ncapture.log:\n"
            + (log.read_text(errors="replace")[-3000:] if log.exists() else "(none)")
            + ("\ncodex stderr tail:\n" + done.stderr[-3000:] if done else ""))


def session_ends(world: Fleet, session_id: str) -> list[dict[str, Any]]:
    return [e for e in world.events()
            if e["kind"] == "session.end" and e.get("session") == session_id]


def test_codex_exec_session_end_hook_captures_the_rollout(clients: Clients,
                                                          fleet: Fleet) -> None:
    if "codex" in clients.cannot_run:  # e.g. a platform the package ships no binary for
        pytest.skip(f"the codex binary cannot run here: {clients.cannot_run['codex']}")
    project = str(fleet.project)
    subprocess.run(["git", "init", "-q", project], check=True, timeout=30)
    subprocess.run(["git", "-C", project, "remote", "add", "origin", REMOTE], check=True,
                   timeout=30)
    (fleet.project / "test_config.py").write_text(TEST_FILE)
    fleet.install("codex")
    hooks = json.loads((fleet.home / ".codex" / "hooks.json").read_text())["hooks"]
    assert {"SessionStart", "SessionEnd", "PreCompact", "PreToolUse"} <= set(hooks), hooks

    with Standin(SCRIPT) as standin:
        provider = (f'model_providers.standin={{name="standin", base_url="{standin.base_url}", '
                    'wire_api="responses"}')
        done = subprocess.run(
            [clients.path("codex"), "exec", "--skip-git-repo-check", "--sandbox",
             "danger-full-access", "--dangerously-bypass-hook-trust", "-m", MODEL,
             "-c", 'model_provider="standin"', "-c", provider, PROMPT],
            cwd=fleet.project, env=clients.env(fleet.home), capture_output=True, text=True,
            timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert FINAL in done.stdout, f"{done.stdout}\n{done.stderr[-3000:]}"
    turns = standin.turns()
    assert len(turns) == 4, [r.path for r in standin.requests]  # one per script step
    outputs = turns[-1].outputs()
    assert "Process exited with code 1" in outputs[call_id(0)], outputs  # the failing check
    assert "FileNotFoundError" in outputs[call_id(0)], outputs
    assert "Process exited with code 0" in outputs[call_id(2)], outputs  # the passing one
    assert (fleet.project / "fixtures.env").read_text() == "FOO=1\n"  # Codex applied the patch

    # -- the rollout Codex wrote, and its session id ------------------------------------------
    [rollout] = (fleet.home / ".codex" / "sessions").glob("*/*/*/rollout-*.jsonl")
    meta = json.loads(rollout.read_text().splitlines()[0])
    assert meta["type"] == "session_meta", meta["type"]
    sid = str(meta["payload"]["id"])
    assert rollout.name.endswith(f"-{sid}.jsonl"), rollout.name
    items = rollout_items(rollout)

    # -- SessionEnd fired; the detached capture spooled the session's end ---------------------
    deadline = time.monotonic() + CAPTURE_WAIT_SECS
    while not session_ends(fleet, sid):
        assert time.monotonic() < deadline, (
            f"no session.end for {sid} within {CAPTURE_WAIT_SECS} s: did Codex fire "
            f"SessionEnd?\n{what_happened(fleet, done)}")
        time.sleep(0.1)
    time.sleep(0.3)  # nothing is spooled after the session's end; let the writer finish
    [end] = session_ends(fleet, sid)
    payload = end["payload"]
    assert (payload["repo"], payload["outcome"], payload["reason"]) == (
        REMOTE, "success", "other"), f"{payload}\n{what_happened(fleet, done)}"
    assert payload["changed_paths"] == ["fixtures.env"], payload
    assert payload["summary"] == f"Asked: {PROMPT}\nConcluded: {FINAL}", payload["summary"]

    proposed = [e["payload"] for e in fleet.events()
                if e["kind"] == "claim.proposed" and e.get("session") == sid]
    by_extractor = {p["extractor"]: p for p in proposed}
    assert {"error_fix", "lesson"} <= set(by_extractor), (
        f"{sorted(by_extractor)}\n{what_happened(fleet, done)}")
    fix = by_extractor["error_fix"]
    assert fix["claim"].startswith(
        f"`{CHECK}` failed (FileNotFoundError: [Errno 2] No such file or directory: "
        "'fixtures.env') and passed after changing fixtures.env"), fix["claim"]
    assert (fix["type"], fix["subject"]) == ("gotcha", "fixtures.env")
    assert by_extractor["lesson"]["claim"] == LESSON
    for claim in proposed:
        cited = {e["message_id"] for e in claim["evidence"]}
        assert cited and cited <= set(items), (
            f"{claim['claim']} cites {cited}, not all in {rollout}")
        assert {e["session_id"] for e in claim["evidence"]} == {sid}
        assert {e["repo"] for e in claim["evidence"]} == {REMOTE}
    # the error→fix cites the failing check's output, the patch, and the passing output
    assert [items[e["message_id"]] for e in fix["evidence"]] == [
        ("function_call_output", call_id(0)), ("custom_tool_call", call_id(1)),
        ("function_call_output", call_id(2))], fix["evidence"]
