"""The briefing's composition: what it lists of a large fleet, and what it cleans to do so."""

from __future__ import annotations

from typing import Any

import pytest

from ctxlake_site import briefing
from mcp_bridge.contract import sanitize

HIDDEN = "\u200b"  # a zero-width space: the sanitiser strips it


def _files(agents: int) -> dict[str, dict[str, Any]]:
    """Rendered roster, handoffs and history of a fleet of `agents` agents, each holding
    twelve leases, with a session and a handoff each and an incident per agent."""
    names = [f"a{i:04d}" for i in range(agents)]
    return {
        "roster": {
            "agents": [
                {"agent_id": f"{name}{HIDDEN}", "runtime": "claude-code",
                 "leases": [{"path": f"src/{name}/m{j}/**"} for j in range(12)]}
                for name in names
            ],
            "contention": [
                {"agents": [name, "zz"], "paths": [f"src/{name}/**", "src/**"],
                 "expires_at": "2026-12-05T21:00:00Z"}
                for name in names
            ],
            "incidents": [
                {"kind": "lease_overlap", "by": name, "paths": [f"src/{name}/x.py"],
                 "at": "2026-12-05T20:00:00Z", "holder": "zz"}
                for name in names
            ],
        },
        "handoffs": {"handoffs": [
            {"id": f"h-{i}", "from_agent": name, "status": "in_progress", "source_trust": "agent",
             "summary": f"halfway through {name}{HIDDEN}", "next": "finish it"}
            for i, name in enumerate(names)
        ]},
        "history": {"sessions": [
            {"session_id": f"s-{name}", "agent_id": name, "repo": "acme/shop", "branch": "main",
             "started_at": "2026-12-05T19:00:00Z", "outcome": "completed",
             "summary": f"did {name}", "changed_paths": [f"src/{name}/a.py"] * 9}
            for name in names
        ]},
    }


def _compose(agents: int) -> str:
    return briefing.compose("acme", **_files(agents), claims=[], generated_at="now",
                            max_tokens=100_000)


def test_a_large_fleet_is_listed_as_a_small_one_and_only_what_is_listed_is_cleaned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sections list LIST_ROWS agents (LEASES_SHOWN leases each), overlaps, incidents,
    handoffs and sessions; the sanitiser is asked about those rows only, so a fleet of 400
    agents costs the briefing what a fleet of 8 does (it cleaned every row before)."""
    cleaned: list[str] = []
    clean_text = sanitize.clean_text

    def counted(text: str, max_chars: int = 2000) -> str:
        cleaned.append(text)
        return clean_text(text, max_chars)

    monkeypatch.setattr(sanitize, "clean_text", counted)
    small = _compose(briefing.LIST_ROWS)
    per_small = len(cleaned)
    cleaned.clear()
    large = _compose(400)

    assert large == small
    assert len(cleaned) == per_small
    assert HIDDEN not in large
    assert large.count("- **a") == briefing.LIST_ROWS
    assert "`src/a0000/m4/**`" in large and "`src/a0000/m5/**`" not in large
    assert large.count("- overlap:") == briefing.LIST_ROWS
    assert large.count("halfway through") == briefing.LIST_ROWS
    assert large.count("acme/shop (main)") == briefing.LIST_ROWS
    assert "a0008" not in large


def test_a_roster_without_incidents_or_with_malformed_ones_lists_none() -> None:
    """Rosters rendered before incidents existed have none; a non-list or a non-object
    item is skipped, never an error."""
    files = _files(2)
    del files["roster"]["incidents"]
    text = briefing.compose("acme", **files, claims=[], generated_at="now")
    assert "Incidents" not in text
    files["roster"]["incidents"] = "not a list"
    assert "Incidents" not in briefing.compose("acme", **files, claims=[], generated_at="now")
    files["roster"]["incidents"] = ["not an object", 7]
    assert "Incidents" not in briefing.compose("acme", **files, claims=[], generated_at="now")
