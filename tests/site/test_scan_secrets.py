"""`manage.py scan_secrets`: a secret planted in each stored place (as an older redactor
would have let it through) is found, and with --redact removed, claims through the
moderation function with an audit event, the drain's spool cursor kept on its line."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from claims.models import Claim, ClaimEvent, Evidence
from fleet.models import Activity, DeadLetter, Handoff, Lease, Session, SpoolCursor
from mcp_bridge import contract
from tests.fleet.conftest import World, world  # noqa: F401  (fixture)

# A secret only today's rules know (the old redactor missed Databricks tokens).
SECRET = "dapi" + "0123456789abcdef" * 2
AWS_PAIR = "AKIAZ7QW3ERT5YUI2OPA wJalrXUtnFEMI/K7MDENG/bPxRfiCY3XAMPL3KEY"


def _scan(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("scan_secrets", "--json", *args, stdout=out)
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


def _snapshot(path: Path, text: str) -> None:
    con = sqlite3.connect(path)
    for ddl in contract.SNAPSHOT_DDL:
        con.execute(ddl)
    columns = [r[1] for r in con.execute("PRAGMA table_info(claims)")]
    values = {c: "x" for c in columns} | {"rowid": 1, "id": "C-1", "text": text,
                                          "confidence": 0.5}
    con.execute(f"INSERT INTO claims ({', '.join(values)}) VALUES "
                f"({', '.join('?' for _ in values)})", list(values.values()))
    con.execute(contract.SNAPSHOT_FTS_REBUILD)
    con.commit()
    con.close()


@pytest.fixture(autouse=True)
def _dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command and the renderer find the spool and cache through these."""
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))


def _plant(world: World, tmp_path: Path) -> dict[str, Path]:  # noqa: F811
    Claim.objects.filter(pk=world.proposed.pk).update(text=f"use token {SECRET} for CI")
    Evidence.objects.filter(claim=world.promoted).update(excerpt=f"export TOKEN={SECRET}")
    Handoff.objects.filter(pk=world.handoff.pk).update(next_steps=f"creds: {AWS_PAIR}")
    Session.objects.filter(pk=world.session.pk).update(summary=f"used {SECRET}")
    Lease.objects.create(fleet=world.fleet, agent=world.ada, path="src/**",
                         reason=f"rotate {SECRET}", expires_at="2099-01-01T00:00:00Z")
    Activity.objects.create(fleet=world.fleet, verb="note.added",
                            data={"nested": [{"excerpt": f"key {SECRET}"}]})
    DeadLetter.objects.create(fleet=world.fleet, file="x.ndjson", cursor_key=1, offset=0,
                              reason=f"bad line with {SECRET}",
                              line=f'{{"summary": "{SECRET}"}}')
    spool, cache = tmp_path / "spool", tmp_path / "cache"
    dead = spool / "dead" / f"{world.fleet.slug}.ndjson"
    dead.parent.mkdir(parents=True)
    dead.write_text(json.dumps({"reason": "bad", "line": f'{{"summary": "{SECRET}"}}'}) + "\n")
    active = spool / contract.SPOOL_SUBDIR / f"{world.fleet.slug}{contract.SPOOL_SUFFIX}"
    active.parent.mkdir(parents=True)
    first = json.dumps({"id": "e1", "payload": {"summary": f"one {SECRET}"}}) + "\n"
    second = json.dumps({"id": "e2", "payload": {"summary": "two, clean"}}) + "\n"
    active.write_text(first + second + '{"id": "e3", "payload": {"summary": "torn')
    stat = active.stat()
    SpoolCursor.objects.create(device=stat.st_dev, inode=stat.st_ino, path=str(active),
                               offset=len(first))
    ghost = cache / "ghost-fleet"  # no such fleet in the database: rewritten in place
    ghost.mkdir(parents=True)
    (ghost / "briefing.md").write_text(f"# Briefing\nmysql -u root -p{SECRET[:12]} shop\n")
    (ghost / "handoffs.json").write_text(json.dumps({"handoffs": [{"summary": SECRET}]}))
    _snapshot(ghost / "snapshot.sqlite", f"the token is {SECRET}")
    (cache / world.fleet.slug / "briefing.md").write_text(f"old render with {SECRET}\n")
    return {"active": active, "ghost": ghost, "dead": dead}


PLACES = ("claims", "evidence", "handoffs", "sessions", "leases", "activity",
          "dead-letter rows", "dead letters", "spool", "cache")


def test_it_finds_a_secret_in_every_place_and_redact_removes_it(
    world: World, tmp_path: Path  # noqa: F811
) -> None:
    files = _plant(world, tmp_path)
    report = _scan()
    for place in PLACES:
        assert report["places"][place]["found"] >= 1, place
    assert report["places"]["claims"]["kinds"] == {"databricks-token": 1}
    assert report["places"]["handoffs"]["kinds"]["aws-access-key"] == 1
    assert report["places"]["claim events"]["found"] == 0
    assert Claim.objects.get(pk=world.proposed.pk).text.count(SECRET) == 1  # a scan changes nothing

    planted = Handoff.objects.get(pk=world.handoff.pk).version  # the plant's update moved it
    fixed = _scan("--redact")
    for place in PLACES:
        assert fixed["places"][place]["rewritten"] >= 1, place
    again = _scan()
    assert again["found"] == 0, again

    claim = Claim.objects.get(pk=world.proposed.pk)
    assert claim.text == "use token [REDACTED:databricks-token] for CI"
    event = ClaimEvent.objects.filter(claim=claim).latest("at")
    assert (event.kind, event.data) == ("edited", {"redacted": ["databricks-token"]})
    assert SECRET not in json.dumps(list(ClaimEvent.objects.values("note", "data")))
    assert "[REDACTED" in Evidence.objects.get(claim=world.promoted).excerpt
    handoff = Handoff.objects.get(pk=world.handoff.pk)
    assert "AKIA" not in handoff.next_steps and "wJalr" not in handoff.next_steps
    assert handoff.version == planted + 1  # the rewrite moved it on
    assert SECRET not in Session.objects.get(pk=world.session.pk).summary
    assert SECRET not in json.dumps(list(Activity.objects.values_list("data", flat=True)))
    assert SECRET not in json.dumps(list(DeadLetter.objects.values("line", "reason")))

    for path in [files["dead"], files["active"], *files["ghost"].iterdir(),
                 *(tmp_path / "cache" / world.fleet.slug).iterdir()]:
        assert SECRET.encode() not in path.read_bytes(), path
        assert SECRET[:12].encode() not in path.read_bytes(), path
    con = sqlite3.connect(files["ghost"] / "snapshot.sqlite")
    assert con.execute("SELECT text FROM claims").fetchone()[0] == (
        "the token is [REDACTED:databricks-token]")
    assert con.execute("SELECT count(*) FROM claims_fts WHERE claims_fts MATCH 'token'"
                       ).fetchone()[0] == 1
    con.close()

    # The drain's cursor still points at the start of the second line, in the new bytes.
    data = files["active"].read_bytes()
    cursor = SpoolCursor.objects.get(path=str(files["active"]))
    assert data[cursor.offset:].startswith(b'{"id":"e2"') or data[cursor.offset:].startswith(
        b'{"id": "e2"')
    assert data.endswith(b'"torn')  # a torn tail is left for its writer


def test_the_progress_output_names_each_place(world: World, tmp_path: Path) -> None:  # noqa: F811
    _plant(world, tmp_path)
    out = io.StringIO()
    call_command("scan_secrets", stdout=out)
    text = out.getvalue()
    for place in PLACES:
        assert f"{place}: " in text
    assert "run again with --redact" in text
    assert SECRET not in text
