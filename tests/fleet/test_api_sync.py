"""Remote sync: cache files with ETags, spool upload validated, scrubbed and idempotent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings

from fleet.models import Activity, InboxEvent
from tests.fleet.conftest import ApiAs, World, ndjson, spool_line


def _inbox_lines(world: World) -> list[bytes]:
    """What the upload stored for the drain: the fleet's inbox rows, oldest first."""
    return [bytes(row.line) for row in InboxEvent.objects.filter(fleet=world.fleet).order_by("id")]


def _post(client: Any, world: World, body: bytes) -> Any:
    return client.post(
        f"/api/v1/fleets/{world.fleet.slug}/spool", data=body, content_type="application/x-ndjson"
    )


def test_it_serves_a_cache_file_with_an_etag_and_304s_a_repeat(api_as: ApiAs, world: World) -> None:
    client = api_as(world.ada)
    url = f"/api/v1/fleets/{world.fleet.slug}/cache/roster.json"
    first = client.get(url)
    assert first.status_code == 200
    assert json.loads(first.content) == {"agents": []}
    etag = first.headers["ETag"]
    assert client.get(url, HTTP_IF_NONE_MATCH=etag).status_code == 304
    index = client.get(f"/api/v1/fleets/{world.fleet.slug}/cache/manifest")
    names = {f["name"]: f["etag"] for f in index.json()["files"]}
    assert names["roster.json"] == etag
    assert index.json()["manifest"] == {"format_version": 1}
    again = client.get(
        f"/api/v1/fleets/{world.fleet.slug}/cache/manifest",
        HTTP_IF_NONE_MATCH=index.headers["ETag"],
    )
    assert again.status_code == 304


def test_only_the_contracts_file_names_are_served(api_as: ApiAs, world: World) -> None:
    client = api_as(world.ada)
    base = f"/api/v1/fleets/{world.fleet.slug}/cache"
    (Path(settings.CTXLAKE_CACHE_DIR) / "secret.txt").write_text("outside")
    for name in ("..%2Fsecret.txt", "secret.txt", "..", "history.json"):
        assert client.get(f"{base}/{name}").status_code == 404, name


def test_it_relays_valid_lines_to_the_servers_inbox_once(api_as: ApiAs, world: World) -> None:
    client = api_as(world.ada)
    good = spool_line(world.fleet.slug)
    first = _post(client, world, ndjson(good))
    assert first.json() == {"accepted": [good["id"]], "rejected": []}
    again = _post(client, world, ndjson(good, good))
    assert again.json() == {"accepted": [good["id"]], "rejected": []}
    assert [json.loads(line)["id"] for line in _inbox_lines(world)] == [good["id"]]
    assert not (Path(settings.CTXLAKE_SPOOL_DIR) / "mcp").exists()  # nothing on this host
    assert Activity.objects.filter(verb="spool.received", target_id=good["id"]).count() == 1


def test_it_rejects_lines_that_break_the_contract_and_keeps_the_rest(
    api_as: ApiAs, world: World
) -> None:
    fleet = world.fleet.slug
    good = spool_line(fleet)
    bad = [
        b"not json",
        json.dumps(spool_line(fleet, v=2)).encode(),
        json.dumps(spool_line(fleet, kind="claim.promoted")).encode(),
        json.dumps(spool_line("fleet-b")).encode(),
        json.dumps(spool_line(fleet, agent="bo")).encode(),  # the token speaks for ada
        json.dumps(spool_line(fleet, payload={"paths": [], "ttl_secs": 60})).encode(),
        json.dumps(spool_line(fleet, id="nope")).encode(),
    ]
    body = b"\n".join(bad) + b"\n" + ndjson(good)
    result = _post(api_as(world.ada), world, body).json()
    assert result["accepted"] == [good["id"]]
    assert [r["line"] for r in result["rejected"]] == [1, 2, 3, 4, 5, 6, 7]
    assert all(r["reason"] for r in result["rejected"])


def test_spooled_secrets_are_scrubbed_before_they_are_written(api_as: ApiAs, world: World) -> None:
    secret = "ghp_" + "a1B2" * 9
    line = spool_line(
        world.fleet.slug,
        kind="claim.proposed",
        payload={
            "claim": f"the token is {secret}",
            "type": "fact",
            "subject": "ci",
            "scope": "agent",
            "evidence": [{"session_id": "s-1", "message_id": "m-1", "excerpt": secret}],
        },
    )
    assert _post(api_as(world.ada), world, ndjson(line)).json()["accepted"] == [line["id"]]
    assert secret not in b"".join(_inbox_lines(world)).decode()
