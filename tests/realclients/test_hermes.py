"""Issue 26 item 6 through the real Hermes Agent: its shell hooks → the briefing and the capture.

`install --runtime hermes` writes ctxlake's server entry and its two hooks into the test
world's ~/.hermes/config.yaml (beside the user's own lines). The real `hermes chat -q`
(pinned, hermes_client.py) then runs one session against the Chat Completions stand-in (the
model is the only thing replaced): the config test fails, the model writes the missing file
with Hermes' write_file tool, the test passes, and the model states a lesson. The
pre_llm_call hook must have put the fleet's briefing into the first request; as the session
ends, on_session_finalize's hook hands Hermes' state.db to the detached capture, which
spools the session's one session.end and the lesson, citing state.db message ids.

Hook consent: Hermes runs a new shell hook only once the user approved it (a TTY prompt);
`hermes chat -q` without a TTY needs `--accept-hooks`, as this test passes.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.capture_log import wait_until_finished
from tests.realclients import hermes_client
from tests.realclients.chat_standin import Call, Say, Standin, Step, call_id
from tests.realclients.conftest import BRIEFING_MARK, FOREIGN_ENV, Fleet
from tests.realclients.matrix import VERSIONS
from tests.realclients.scenario import CHECK, REMOTE, checkout

pytestmark = pytest.mark.slow

PROMPT = "The config unit test fails on a fresh checkout; please fix it."
LESSON = ("Turns out the config tests read `FOO=1` from fixtures.env, so a fresh checkout "
          "needs that file before they run.")
FINAL = f"The config test passes now. {LESSON}"
SCRIPT: list[Step] = [Call("terminal", {"command": CHECK}),
                      Call("write_file", {"path": "fixtures.env", "content": "FOO=1\n"}),
                      Call("terminal", {"command": CHECK}), Say(FINAL)]
#: The user's own config: a comment and a setting install must leave as they are.
USER_CONFIG = """\
# my Hermes settings
model:
  default: standin-model
  provider: custom
  base_url: {base_url}
  api_key: sk-standin   # not a real key
"""


@pytest.fixture(scope="session")
def hermes() -> Path:
    """The pinned `hermes` command; its version goes into the closing matrix."""
    VERSIONS["hermes"] = f"{hermes_client.pinned()} (pinned)"
    status = hermes_client.ensure(lambda text: sys.stderr.write(f"ctxlake: {text}\n"))
    if not status.ready:
        if status.unreachable:
            pytest.skip(f"Hermes not installed: {status.reason}")
        pytest.fail(f"Hermes not installed: {status.reason}")
    done = subprocess.run([str(hermes_client.hermes()), "--version"], capture_output=True,
                          text=True, timeout=60)
    VERSIONS["hermes"] = (done.stdout.splitlines() or ["?"])[0]
    return hermes_client.hermes()


def hermes_env(world: Fleet) -> dict[str, str]:
    """Hermes' environment: this world's HOME (so ~/.hermes), nothing of ours inherited."""
    import os

    base = {k: v for k, v in os.environ.items()
            if not k.startswith(FOREIGN_ENV)}
    return {**base, "HOME": str(world.home), "NO_COLOR": "1"}


def state_ids(db: Path, session: str) -> set[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return {str(r[0]) for r in conn.execute(
            "SELECT id FROM messages WHERE session_id = ?", (session,))}


def test_hermes_chat_gets_the_briefing_and_its_session_is_captured(hermes: Path,
                                                                     fleet: Fleet) -> None:
    checkout(fleet.project, commit=True)
    config = fleet.home / ".hermes" / "config.yaml"
    config.parent.mkdir()
    with Standin(SCRIPT) as standin:
        user = USER_CONFIG.format(base_url=standin.base_url)
        config.write_text(user)
        fleet.install("hermes")
        text = config.read_text()
        assert text.startswith(user), text  # the user's lines, byte for byte
        done = subprocess.run(
            [str(hermes), "chat", "-q", PROMPT, "--accept-hooks", "--yolo", "-Q"],
            cwd=fleet.project, env=hermes_env(fleet), capture_output=True, text=True, timeout=240,
            stdin=subprocess.DEVNULL)
    assert done.returncode == 0, fleet.what_happened(done)
    turns = standin.turns()
    assert turns, [r.path for r in standin.requests]
    # the briefing reached the model: in the first request's user message, once
    first = [m for m in turns[0].messages() if m.get("role") == "user"]
    assert BRIEFING_MARK in json.dumps(first), fleet.what_happened(done)
    assert all(BRIEFING_MARK not in json.dumps(m) for t in turns[1:] for m in t.messages()
               [len(turns[0].messages()):]), "briefed again after the first turn"
    outputs = {str(m.get("tool_call_id")): str(m.get("content")) for t in turns
               for m in t.messages() if m.get("role") == "tool"}
    assert call_id(0) in outputs and call_id(2) in outputs, outputs
    assert (fleet.project / "fixtures.env").read_text() == "FOO=1\n"  # Hermes wrote it

    db = fleet.home / ".hermes" / "state.db"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (sid,) = {r[0] for r in conn.execute("SELECT id FROM sessions")}
    wait_until_finished(fleet.ctx_home, session=sid, context=lambda: fleet.what_happened(done))
    ends = [e for e in fleet.events() if e["kind"] == "session.end" and e["session"] == sid]
    assert len(ends) == 1, fleet.what_happened(done)
    payload: dict[str, Any] = ends[0]["payload"]
    assert (payload["repo"], payload["outcome"]) == (REMOTE, "success"), payload
    assert payload["changed_paths"] == ["fixtures.env"], payload
    assert payload["summary"] == f"Asked: {PROMPT}\nConcluded: {FINAL}", payload["summary"]
    proposed = [e["payload"] for e in fleet.events()
                if e["kind"] == "claim.proposed" and e["session"] == sid]
    assert [p["claim"] for p in proposed] == [LESSON], fleet.what_happened(done)
    (lesson,) = proposed
    assert any("FileNotFoundError" in c["excerpt"] for c in lesson["evidence"]), lesson
    cited = {c["message_id"] for p in proposed for c in p["evidence"]}
    assert cited and cited <= state_ids(db, sid), cited
    assert BRIEFING_MARK not in json.dumps(fleet.events())  # the briefing is not the user's
