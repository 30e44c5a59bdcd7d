from __future__ import annotations

import json
from pathlib import Path

from mcp_bridge import contract, tools
from mcp_bridge.cache import Cache
from mcp_bridge.config import Config
from tests.mcp_bridge.data import FLEET


def cache_of(cfg: Config) -> Cache:
    return Cache(cfg.fleet_cache, fleet=FLEET)


def test_it_notes_a_cache_that_was_never_rendered(config: Config) -> None:
    read = cache_of(config).read(contract.ROSTER)
    assert read.value is None and "no manifest.json rendered yet" in read.note


def test_it_ignores_corrupt_json_with_a_note(live: Config) -> None:
    (live.fleet_cache / contract.ROSTER).write_text('{"format_version": 1, "agents": [')
    read = cache_of(live).read(contract.ROSTER)
    assert read.value is None and "unparseable" in read.note


def test_it_refuses_another_format_version(live: Config) -> None:
    path = live.fleet_cache / contract.MANIFEST
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "format_version": 99}))
    read = cache_of(live).read(contract.ROSTER)
    assert read.value is None and "format_version 99" in read.note


def test_it_refuses_a_cache_for_another_fleet(live: Config) -> None:
    path = live.fleet_cache / contract.MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), "fleet": "fleet-b"}))
    assert "fleet-b" in cache_of(live).read(contract.HISTORY).note


def test_it_refuses_non_object_files(live: Config) -> None:
    (live.fleet_cache / contract.HISTORY).write_text("[1, 2]")
    assert "not a JSON object" in cache_of(live).read(contract.HISTORY).note


def test_it_notes_a_truncated_snapshot(live: Config) -> None:
    path = live.fleet_cache / contract.SNAPSHOT
    path.write_bytes(path.read_bytes()[:3000])
    read = cache_of(live).snapshot()
    assert read.value is None and "unreadable" in read.note


def test_it_notes_a_snapshot_that_is_not_sqlite(live: Config) -> None:
    (live.fleet_cache / contract.SNAPSHOT).write_bytes(b"\x00garbage" * 100)
    assert "unreadable" in cache_of(live).snapshot().note


def test_it_sanitises_everything_it_reads(live: Config) -> None:
    path = live.fleet_cache / contract.ROSTER
    roster = json.loads(path.read_text())
    roster["agents"][0]["note\u200b"] = {"deep": ["hi\U000e0041\u202e"]}
    path.write_text(json.dumps(roster))
    agent = cache_of(live).read(contract.ROSTER).value["agents"][0]
    assert agent["note"] == {"deep": ["hi"]}


def test_it_sees_a_re_rendered_file(live: Config) -> None:
    cache = cache_of(live)
    assert cache.read(contract.HISTORY).value["sessions"]
    path = live.fleet_cache / contract.HISTORY
    path.write_text(json.dumps({"format_version": 1, "fleet": FLEET, "sessions": []}))
    assert cache.read(contract.HISTORY).value["sessions"] == []


def test_it_reopens_a_replaced_snapshot(live: Config, bridge: tools.Bridge) -> None:
    from mcp_bridge import testing

    assert tools.memory_search(bridge, "stripe webhooks")["results"]
    testing.write_snapshot(live.fleet_cache / contract.SNAPSHOT, FLEET, [], vectors=None)
    assert tools.memory_search(bridge, "stripe webhooks")["results"] == []


def test_it_reads_the_briefing(live: Config, tmp_path: Path) -> None:
    assert cache_of(live).briefing().startswith("# Fleet briefing")


def test_it_refuses_a_snapshot_of_another_format_version(live: Config) -> None:
    import sqlite3

    path = live.fleet_cache / contract.SNAPSHOT
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '7' WHERE key = 'format_version'")
    db.commit()
    db.close()
    read = cache_of(live).snapshot()
    assert read.value is None and "format_version '7'" in read.note


def test_it_degrades_to_a_note_when_the_snapshot_lacks_a_table(live: Config,
                                                              bridge: tools.Bridge) -> None:
    import sqlite3

    db = sqlite3.connect(live.fleet_cache / contract.SNAPSHOT)
    db.execute("DROP TABLE claims_fts")
    db.commit()
    db.close()
    out = tools.memory_search(bridge, "stripe webhooks")
    assert out["results"] == [] and "query failed" in out["note"]


def test_it_ignores_wrong_sized_vectors(live: Config, bridge: tools.Bridge) -> None:
    import sqlite3

    db = sqlite3.connect(live.fleet_cache / contract.SNAPSHOT)
    db.execute("UPDATE embeddings SET vector = x'00010203'")
    db.commit()
    db.close()
    out = tools.memory_search(bridge, "stripe webhooks idempotent")
    assert out["results"][0]["id"] == "cc-02"  # found lexically
