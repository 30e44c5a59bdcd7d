from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mcp_bridge import contract
from mcp_bridge.contract.spool import Spool, SpoolFull, read_events

ROOT = Path(__file__).resolve().parents[2]


def spool(tmp_path: Path, **kw: int) -> Spool:
    return Spool(tmp_path, fleet="fleet-a", agent="ada", session="s1", **kw)


def test_it_appends_one_complete_json_line_per_event(tmp_path: Path) -> None:
    s = spool(tmp_path)
    receipt = s.append("lease.claim", {"paths": ["src/**"], "reason": "r", "ttl_secs": 60})
    lines = s.path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 1 and lines[0].endswith(b"\n")
    event = json.loads(lines[0])
    assert set(event) == {"v", "id", "kind", "fleet", "agent", "session", "at", "payload"}
    assert event["id"] == receipt.event_id and uuid.UUID(event["id"]).version == 4
    assert (event["v"], event["kind"], event["fleet"], event["agent"], event["session"]) == (
        1, "lease.claim", "fleet-a", "ada", "s1")
    assert event["at"].endswith("Z")
    assert receipt.as_dict()["status"] == "queued for sync"


def test_it_rotates_to_timestamped_files_that_sort_in_write_order(tmp_path: Path) -> None:
    s = spool(tmp_path, file_max_bytes=600)
    ids = [s.append("handoff.create", {"summary": f"n{i}" * 20, "status": "done"}).event_id
           for i in range(12)]
    rotated = sorted(p.name for p in s.dir.glob("fleet-a.*.ndjson"))
    assert rotated and all(n.startswith("fleet-a.2") and n.endswith("Z.ndjson") or "-" in n
                           for n in rotated)
    assert all(p.stat().st_size <= 600 for p in s.dir.glob("*.ndjson"))
    assert [e["id"] for e in read_events(tmp_path, "fleet-a")] == ids


def test_it_refuses_past_the_cap_and_writes_nothing(tmp_path: Path) -> None:
    s = spool(tmp_path, max_bytes=1000)
    s.append("handoff.create", {"summary": "x" * 500, "status": "done"})
    before = s.path.read_bytes()
    with pytest.raises(SpoolFull, match="spool is full"):
        s.append("handoff.create", {"summary": "y" * 500, "status": "done"})
    assert s.path.read_bytes() == before


def test_it_refuses_a_single_line_over_the_line_limit(tmp_path: Path) -> None:
    """Within every field limit, yet over the line limit once escaped as ASCII JSON (an
    emoji is 12 bytes there): refused whole, with what to do."""
    cite = {"session_id": "s", "message_id": "m", "excerpt": "\U0001F600" * 2000}
    payload = {"claim": "c", "type": "fact", "subject": "s", "evidence": [cite] * 20}
    with pytest.raises(SpoolFull, match="Shorten"):
        spool(tmp_path).append("claim.proposed", payload)


def test_it_never_glues_a_new_line_onto_a_torn_one(tmp_path: Path) -> None:
    s = spool(tmp_path)
    first = s.append("lease.release", {"paths": [], "all": True}).event_id
    with open(s.path, "ab") as f:
        f.write(b'{"v":1,"id":"torn","kind":"lease.cl')  # a writer died mid-line
    assert [e["id"] for e in read_events(tmp_path, "fleet-a")] == [first]  # torn tail waits
    second = s.append("lease.release", {"paths": [], "all": True}).event_id
    assert [e["id"] for e in read_events(tmp_path, "fleet-a")] == [first, second]
    assert s.path.read_bytes().count(b"\n") == 3


WRITER = """
import sys
from pathlib import Path
from mcp_bridge.contract.spool import Spool
s = Spool(Path(sys.argv[1]), fleet="fleet-a", agent="w" + sys.argv[2], file_max_bytes=40_000)
for i in range(200):
    s.append("handoff.create", {"summary": f"writer {sys.argv[2]} event {i} " + "x" * 64,
                                "status": "done"})
"""


def test_it_loses_duplicates_and_interleaves_nothing_under_8_concurrent_writers(
        tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(n)], env=env)
             for n in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    root = tmp_path / contract.SPOOL_SUBDIR
    raw = b"".join(p.read_bytes() for p in sorted(root.glob("*.ndjson")))
    lines = raw.splitlines()
    events = [json.loads(line) for line in lines]  # any interleaving would fail to parse
    assert len(events) == 1600
    assert len({e["id"] for e in events}) == 1600
    for n in range(8):
        mine = [e["payload"]["summary"].split()[3] for e in events if e["agent"] == f"w{n}"]
        assert sorted(mine, key=int) == [str(i) for i in range(200)]
    assert len(list(root.glob("fleet-a.*.ndjson"))) >= 2  # rotation happened under load
