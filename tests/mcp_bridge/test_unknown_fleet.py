"""A mistyped fleet, loudly: every answer of the real bridge says the fleet is unknown here.

The bug: with CTXLAKE_FLEET_ID naming a fleet that does not exist, the bridge answered
"queued for sync" and said the workers would render the fleet — which never happens.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge import contract, testing, tools
from mcp_bridge.config import Config
from mcp_bridge.contract.atomic import write_json
from mcp_bridge.contract.spool import Spool
from tests.mcp_bridge.data import FLEET
from tests.mcp_bridge.stdio import INIT, ROOT, bridge_env, call, frame, run_session

CITE = {"session_id": "s1", "message_id": "m1"}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("fleet_status", {}),
    ("fleet_history", {}),
    ("memory_search", {"query": "ci cache"}),
    ("memory_timeline", {"subject": "ci"}),
    ("fleet_claim", {"paths": ["src/a.py"], "reason": "refactor"}),
    ("fleet_release", {}),
    ("fleet_handoff", {"summary": "done", "status": "done"}),
    ("memory_propose", {"claim": "CI caches wheels", "type": "fact", "subject": "ci",
                        "evidence": [CITE]}),
]


def test_every_tool_answer_names_the_unknown_fleet_and_create_fleet(config: Config) -> None:
    session = INIT + frame(None, "notifications/initialized") + b"".join(
        call(i, name, args) for i, (name, args) in enumerate(CALLS, start=2))
    done = run_session(config, session)
    assert done.returncode == 0, done.stderr.decode()
    answers = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    for i, (name, _) in enumerate(CALLS, start=2):
        result = answers[i]["result"]
        assert result.get("isError") is not True, (name, result)
        note = result["structuredContent"]["note"]
        assert f"fleet {FLEET!r} is unknown here" in note, (name, note)
        assert f"`manage.py create_fleet {FLEET}`" in note, (name, note)
        assert "CTXLAKE_FLEET_ID" in note
        assert note.count("is unknown here") == 1  # said once, not once per source


def test_a_rendered_fleet_has_no_such_note(config: Config) -> None:
    testing.build_cache(config.cache_dir, FLEET, memory_mode="off")
    bridge = tools.Bridge.from_config(config)
    for name, args in CALLS:
        assert "unknown here" not in bridge.call(name, dict(args)).get("note", ""), name


def test_fleet_status_shows_the_cache_age_and_what_this_host_queued_since(
        config: Config) -> None:
    root = testing.build_cache(config.cache_dir, FLEET, memory_mode="off")
    spool = Spool(config.spool_dir, fleet=FLEET, agent="ada", session="s")
    spool.append("lease.release", {"paths": [], "all": True})
    spool.append("lease.release", {"paths": [], "all": True})
    bridge = tools.Bridge.from_config(config)
    now = dt.datetime.now(dt.UTC)
    _rendered_at(root, testing.iso(now - dt.timedelta(minutes=5)))  # both lines came after
    status = bridge.call("fleet_status", {})
    assert 290 <= status["cache_age_secs"] <= 400
    assert status["spool"]["unsent_lines"] == 2 and status["spool"]["unsent_more"] is False
    assert 0 <= status["spool"]["oldest_unsent_secs"] < 60
    assert status["spool"]["rejected_lines"] == 0
    _rendered_at(root, testing.iso(now + dt.timedelta(minutes=1)))  # a render after both
    assert bridge.call("fleet_status", {})["spool"]["unsent_lines"] == 0


def _rendered_at(root: Path, when: str) -> None:
    roster = json.loads((root / contract.ROSTER).read_text())
    write_json(root / contract.ROSTER, {**roster, "generated_at": when})


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        ("CTXLAKE_SPOOL_MAX_BYTES", "lots", "CTXLAKE_SPOOL_MAX_BYTES='lots' is not a positive"),
        ("CTXLAKE_MAX_FIELD_CHARS", "-3", "CTXLAKE_MAX_FIELD_CHARS='-3' is not a positive"),
        ("CTXLAKE_LOG_LEVEL", "LOUD", "CTXLAKE_LOG_LEVEL='LOUD' is not allowed: one of DEBUG"),
    ],
)
def test_a_bad_bridge_setting_is_one_stderr_line_and_no_traceback(
        config: Config, name: str, raw: str, said: str) -> None:
    """The bridge does not exit over its environment (the runtime would show the agent
    nothing); it says so in one line on stderr, once, and keeps answering."""
    done = subprocess.run(
        [sys.executable, "-m", "mcp_bridge"], input=INIT + call(2, "fleet_status", {}),
        capture_output=True, env=bridge_env(config, **{name: raw}), timeout=60, cwd=ROOT)
    assert done.returncode == 0
    about = [line for line in done.stderr.decode().splitlines() if name in line]
    assert len(about) == 1 and about[0].startswith(f"ctxlake-mcp WARNING {said}"), about
    assert "Traceback" not in done.stderr.decode()
    answers = {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert 2 in answers
