"""Spool lines received over REST: stored in the inbox table, drained exactly once.

The upload writes nothing to the web host's disk; the drain claims a fleet's rows, applies
them with the spool files' contract and dead letters, and deletes them in the same
transaction. A drain that holds a fleet's inbox (or was killed holding it) never makes
another apply its rows twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from ctxlake_site import drain, workers
from fleet import inbox
from fleet.models import Activity, AppliedEvent, DeadLetter, Fleet, InboxEvent, Lease
from mcp_bridge.contract.spool import MAX_LINE_BYTES
from tests.fleet.conftest import ApiAs, ndjson, spool_line


def _post(client: Any, fleet: Fleet, body: bytes) -> Any:
    return client.post(f"/api/v1/fleets/{fleet.slug}/spool", data=body,
                       content_type="application/x-ndjson")


def _claims(fleet: Fleet, n: int) -> list[dict[str, Any]]:
    return [spool_line(fleet.slug, payload={"paths": [f"src/{i}.py"], "reason": "r",
                                           "ttl_secs": 600}) for i in range(n)]


def test_it_applies_uploaded_lines_once_and_deletes_their_rows(
    api_as: ApiAs, fleet_a: Fleet, ada: Any, spool_dir: Path
) -> None:
    lines = _claims(fleet_a, 3)
    assert _post(api_as(ada), fleet_a, ndjson(*lines)).status_code == 200
    assert InboxEvent.objects.filter(fleet=fleet_a).count() == 3
    assert not (spool_dir / "mcp").exists()  # nothing on the web host's disk

    report = workers.drain_spool()

    assert (report.applied, report.dead, report.duplicates) == (3, 0, 0)
    assert not InboxEvent.objects.exists()
    assert set(AppliedEvent.objects.values_list("source", flat=True)) == {"api"}
    assert Lease.objects.filter(fleet=fleet_a).count() == 3
    again = _post(api_as(ada), fleet_a, ndjson(*lines))  # a retry after the apply
    assert again.json()["accepted"] == [e["id"] for e in lines]
    assert not InboxEvent.objects.exists()
    assert workers.drain_spool().applied == 0
    assert Activity.objects.filter(verb="spool.received").count() == 3


def test_a_row_already_applied_is_a_duplicate_and_goes(fleet_a: Fleet, ada: Any) -> None:
    """A retry that raced the drain's delete stores the id again: applied once all the same."""
    (line,) = _claims(fleet_a, 1)
    raw = json.dumps(line).encode()
    inbox.admit(fleet_a, [(line["id"], line["kind"], raw)])
    assert workers.drain_spool().applied == 1
    inbox.admit(fleet_a, [(line["id"], line["kind"], raw)])

    report = workers.drain_spool()

    assert (report.applied, report.duplicates) == (0, 1)
    assert not InboxEvent.objects.exists() and Lease.objects.count() == 1


def test_a_row_the_drain_refuses_is_one_dead_letter(fleet_a: Fleet, ada: Any) -> None:
    good, bad = _claims(fleet_a, 2)
    bad["payload"] = {"paths": "not a list", "reason": "", "ttl_secs": 60}
    inbox.admit(fleet_a, [(e["id"], e["kind"], json.dumps(e).encode()) for e in (good, bad)])
    row = InboxEvent.objects.get(event_id=bad["id"])

    report = workers.drain_spool()

    assert (report.applied, report.dead) == (1, 1)
    (letter,) = DeadLetter.objects.all()
    assert (letter.cursor_key, letter.offset, letter.file) == (drain.INBOX_KEY, row.pk, "inbox")
    assert bad["id"] in letter.line and "paths" in letter.reason
    assert not InboxEvent.objects.exists()
    assert workers.drain_spool().dead == 0 and DeadLetter.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_fleet_another_drain_holds_is_skipped_and_taken_once_it_dies(
    fleet_a: Fleet, ada: Any
) -> None:
    """What a SIGKILLed worker leaves: its transaction holds the fleet and the rows until
    its connection goes; then the next drain claims the rows and applies each once."""
    lines = _claims(fleet_a, 4)
    inbox.admit(fleet_a, [(e["id"], e["kind"], json.dumps(e).encode()) for e in lines])
    other = connections.create_connection("default")
    try:
        other.set_autocommit(False)
        with other.cursor() as cur:  # the "killed" worker's claim, mid-batch
            cur.execute("SELECT pg_try_advisory_xact_lock(%s::int, %s::int)",
                        [inbox._DRAIN_LOCK_CLASS, fleet_a.pk])
            cur.execute("SELECT id FROM fleet_inboxevent ORDER BY id LIMIT 2 FOR UPDATE")
        assert workers.drain_spool().applied == 0  # held: skipped, not waited on
        assert InboxEvent.objects.count() == 4
    finally:
        other.close()  # the connection dies without COMMIT, as a killed process's does
    report = workers.drain_spool()
    assert report.applied == 4 and not InboxEvent.objects.exists()
    assert AppliedEvent.objects.count() == 4 and Lease.objects.count() == 4


def test_the_same_event_through_two_web_hosts_is_stored_once(
    api_as: ApiAs, fleet_a: Fleet, ada: Any
) -> None:
    line = spool_line(fleet_a.slug)
    one, two = api_as(ada), api_as(fleet_a, "operator")  # two hosts' clients, two tokens
    for client in (one, two, one):
        answer = _post(client, fleet_a, ndjson(line))
        assert answer.json() == {"accepted": [line["id"]], "rejected": []}
    assert InboxEvent.objects.filter(event_id=line["id"]).count() == 1
    assert Activity.objects.filter(verb="spool.received", target_id=line["id"]).count() == 1
    assert workers.drain_spool().applied == 1
    assert AppliedEvent.objects.filter(event_id=line["id"]).count() == 1


def test_an_id_another_fleet_has_waiting_is_refused(
    api_as: ApiAs, fleet_a: Fleet, fleet_b: Fleet, ada: Any, cy: Any
) -> None:
    theirs = spool_line(fleet_b.slug, agent="cy")
    inbox.admit(fleet_b, [(theirs["id"], theirs["kind"], json.dumps(theirs).encode())])
    mine = spool_line(fleet_a.slug, id=theirs["id"])
    answer = _post(api_as(ada), fleet_a, ndjson(mine))
    assert answer.status_code == 400
    assert answer.json()["rejected"] == [
        {"id": theirs["id"], "line": None, "reason": "duplicate event id"}]
    assert not InboxEvent.objects.filter(fleet=fleet_a).exists()


@pytest.mark.parametrize(
    ("name", "raw", "reason"),
    [
        ("oversized", b'{"pad": "' + b"x" * MAX_LINE_BYTES + b'"}', "bytes"),
        ("a NUL byte", json.dumps(spool_line("fleet-a")).encode().replace(b'"src', b'"\0src'),
         "not JSON"),
        ("invalid UTF-8", json.dumps(spool_line("fleet-a")).encode().replace(b"refactor",
                                                                         b"ref\xff\xfeactor"),
         "not JSON"),
    ],
)
def test_a_hostile_line_is_refused_clearly_and_nothing_is_stored(
    name: str, raw: bytes, reason: str, api_as: ApiAs, fleet_a: Fleet, settings: Any
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4 << 20
    client = api_as(fleet_a, "operator")
    answer = _post(client, fleet_a, raw + b"\n")
    assert answer.status_code == 400, answer.content[:300]
    (rejected,) = answer.json()["rejected"]
    assert reason in rejected["reason"], rejected
    assert not InboxEvent.objects.exists()
    assert not Activity.objects.filter(verb="spool.received").exists()



def test_a_batch_of_rows_ends_once_its_lines_reach_the_byte_budget(
    fleet_a: Fleet, ada: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is bounded in memory as a file's is: the rows past the budget wait."""
    lines = [spool_line(fleet_a.slug, payload={"paths": [f"src/{i}.py"], "reason": "x" * 500,
                                               "ttl_secs": 600}) for i in range(10)]
    raws = [json.dumps(e).encode() for e in lines]
    inbox.admit(fleet_a, [(e["id"], e["kind"], raw) for e, raw in zip(lines, raws, strict=True)])
    batches: list[int] = []
    sizes = [len(raw) for raw in raws]
    assert 3 * min(sizes) > 2 * max(sizes) + 1
    monkeypatch.setattr(drain, "BATCH_BYTES", 2 * max(sizes) + 1)  # < 3 lines' bytes

    report = workers.drain_spool(progress=lambda r: batches.append(r.applied - sum(batches)))

    assert report.applied == 10 and batches == [3, 3, 3, 1]
    assert not InboxEvent.objects.exists()
    assert sorted(Lease.objects.values_list("path", flat=True)) == sorted(
        f"src/{i}.py" for i in range(10))
