"""The bridge's local record of the incidents it has told its agent about: once each."""

from __future__ import annotations

from pathlib import Path

from mcp_bridge.told import Told


def _incident(n: int) -> dict[str, str]:
    return {"id": f"i-{n}", "text": f"ada edited src/{n}.py inside your lease at 14:0{n}Z"}


def test_each_incident_is_told_once_across_bridge_processes(tmp_path: Path) -> None:
    first, ids = Told(tmp_path, "acme", "bo").note([_incident(1)])
    assert ids == ["i-1"]
    assert first == ("ctxlake incident: ada edited src/1.py inside your lease at 14:01Z (i-1). "
                     "See fleet_status `yours.incidents`.")
    assert Told(tmp_path, "acme", "bo").note([_incident(1)]) == (None, [])  # a new process
    assert Told(tmp_path, "acme", "bo").note([_incident(2), _incident(1)])[1] == ["i-2"]
    assert Told(tmp_path, "acme", "ada").note([_incident(1)])[0] is not None  # another agent


def test_many_at_once_are_one_line_and_a_broken_record_costs_a_repeat(tmp_path: Path) -> None:
    told = Told(tmp_path, "acme", "bo")
    line = told.note([_incident(n) for n in range(1, 6)])[0] or ""
    assert "\n" not in line and line.count("(i-") == 3 and "+2 more" in line
    told.path.write_text("{not json")
    assert Told(tmp_path, "acme", "bo").note([_incident(1)])[0] is not None


def test_entries_without_an_id_or_text_are_ignored(tmp_path: Path) -> None:
    assert Told(tmp_path, "acme", "bo").note([{"id": 3}, {"text": "x"}, {}]) == (None, [])
