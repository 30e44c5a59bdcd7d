"""The change feed (GET changes): wakes on a published render, times out, bounds its waiters.

Waiting tests run against pytest-django's live_server (real HTTP, one thread per request,
the test database committed for real, since NOTIFY is delivered only at COMMIT).
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection

from ctxlake_site import workers
from fleet import api_changes, artifacts, change_feed, tokens
from fleet.models import Fleet
from mcp_bridge import contract
from tests.fleet.conftest import ApiAs, World
from tests.helpers import HANG_GUARD_SECS, until

FEED = change_feed.FEED


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


@pytest.fixture(autouse=True)
def feed() -> Iterator[change_feed.Feed]:
    """Each test's listener ends with it: its connection would keep the test DB from dropping."""
    yield FEED
    FEED.stop()


@pytest.fixture
def server(
    transactional_db: None,
    live_server: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fleet_a: Fleet,
) -> Callable[..., Answer]:
    """get(secret, **query) → the answer to GET changes over real HTTP (a read that takes
    over `read_secs` fails the test)."""
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    cache.delete(change_feed.version_key(fleet_a.slug))  # the cache table outlives a flush

    def get(secret: str, read_secs: float = 60, **query: str) -> Answer:
        url = f"{live_server.url}/api/v1/fleets/{fleet_a.slug}/changes"
        req = urllib.request.Request(
            f"{url}?{urllib.parse.urlencode(query)}", headers={"Authorization": f"Bearer {secret}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=read_secs) as r:
                raw, status, headers = r.read(), r.status, dict(r.headers)
        except urllib.error.HTTPError as e:
            raw, status, headers = e.read(), e.code, dict(e.headers)
        body = json.loads(raw) if raw else {}
        return Answer(status, body, headers)

    return get


def _secret(fleet: Fleet, name: str) -> str:
    return tokens.issue_token(fleet, role="integration", name=name).secret


_until = partial(until, secs=30, poll=0.02)


#: How long a stretched long-poll waits: far past any flood's duration.
HOLD = HANG_GUARD_SECS


def _parked(n: int) -> Callable[[], bool]:
    return lambda: FEED.counts()[0] == n


def test_it_wakes_a_waiting_long_poll_when_a_render_is_published(
    server: Callable[..., Answer], fleet_a: Fleet
) -> None:
    secret = _secret(fleet_a, "host-1")
    workers.render_fleet(fleet_a)
    first = server(secret)  # no `after`: the version now, at once
    assert first.status == 200 and first.body["version"] != change_feed.NO_VERSION
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(server, secret, after=first.body["version"], wait="30")
        _until(_parked(1), "the long-poll to wait")
        workers.render_fleet(fleet_a)
        woke = waiting.result()
    assert woke.status == 200  # a wait that ran out answers 204: the render woke it
    assert woke.body["version"] not in (first.body["version"], change_feed.NO_VERSION)
    assert woke.body["version"] == change_feed.current_version(fleet_a.slug)
    assert FEED.counts() == (0, 0)


def test_it_answers_204_when_nothing_changes_and_at_once_when_behind(
    server: Callable[..., Answer], fleet_a: Fleet
) -> None:
    secret = _secret(fleet_a, "host-1")
    now = server(secret).body["version"]
    assert now == change_feed.NO_VERSION  # nothing rendered yet: a version all the same
    quiet = server(secret, after=now, wait="1")
    assert (quiet.status, quiet.body) == (204, {})
    behind = server(secret, after="2020-01-01T00:00:00Z", wait="30")
    assert (behind.status, behind.body) == (200, {"version": now})  # not a 204: no wait
    assert FEED.counts() == (0, 0)


def test_a_new_version_comes_with_the_listing_get_manifest_would_send(
    server: Callable[..., Answer], fleet_a: Fleet, live_server: Any
) -> None:
    secret = _secret(fleet_a, "host-1")
    workers.render_fleet(fleet_a)
    answer = server(secret, after="2020-01-01T00:00:00Z", wait="0")
    req = urllib.request.Request(f"{live_server.url}/api/v1/fleets/{fleet_a.slug}/cache/manifest",
                                 headers={"Authorization": f"Bearer {secret}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        manifest, etag = json.loads(r.read()), r.headers["ETag"]
    assert answer.status == 200 and answer.body["version"] != change_feed.NO_VERSION
    assert answer.body["listing"] == {"etag": etag, "files": manifest["files"]}
    assert {f["name"] for f in manifest["files"]} >= {"roster.json", "manifest.json"}


def test_a_host_that_names_what_it_holds_gets_the_small_files_it_lacks(
    server: Callable[..., Answer], fleet_a: Fleet
) -> None:
    """`have` empty: every listed small text file comes whole, each the bytes its listed
    ETag names; the snapshot never (it has deltas). A named ETag is left out; no `have`,
    no bodies (what an older host gets)."""
    secret = _secret(fleet_a, "host-1")
    workers.render_fleet(fleet_a)
    answer = server(secret, after="2020-01-01T00:00:00Z", wait="0", have="")
    listed = {f["name"]: f["etag"] for f in answer.body["listing"]["files"]}
    sent = answer.body["files"]
    assert set(sent) == set(listed) & set(contract.INLINE_FILES)
    assert {contract.MANIFEST, contract.ROSTER, contract.HANDOFFS} <= set(sent)
    assert contract.SNAPSHOT in listed and contract.SNAPSHOT not in sent
    for name, text in sent.items():
        assert contract.etag_of(hashlib.sha256(text.encode()).hexdigest()) == listed[name]
        assert artifacts.latest(fleet_a, name) == (listed[name], text.encode())

    held = ",".join([listed[contract.ROSTER], listed[contract.MANIFEST]])
    fewer = server(secret, have=held).body["files"]  # no `after`: the version now, as well
    assert set(fewer) == set(sent) - {contract.ROSTER, contract.MANIFEST}
    assert "files" not in server(secret, after="2020-01-01T00:00:00Z", wait="0").body


def test_inlined_bodies_stay_within_their_budget(
    server: Callable[..., Answer], fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files that would take an answer past the budget are left for the host to GET."""
    secret = _secret(fleet_a, "host-1")
    workers.render_fleet(fleet_a)
    sizes = {f["name"]: f["size"] for f in server(secret).body["listing"]["files"]}
    budget = sizes[contract.ROSTER] + sizes[contract.HANDOFFS]
    monkeypatch.setattr(api_changes, "INLINE_MAX_BYTES", budget)
    sent = server(secret, have="").body["files"]
    assert sent and sum(sizes[name] for name in sent) <= budget
    assert set(sent) < set(sizes) & set(contract.INLINE_FILES)
    monkeypatch.setattr(api_changes, "INLINE_MAX_BYTES", 0)
    assert "files" not in server(secret, have="").body


def test_a_render_during_a_listener_outage_still_wakes_the_waiter(
    server: Callable[..., Answer], fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener's connection is killed; the render's NOTIFY goes nowhere; on reconnect
    the listener reads the versions of the fleets with waiters and wakes them."""
    monkeypatch.setattr(change_feed, "RECONNECT_SECS", (3.0, 30.0))  # a wide outage window
    secret = _secret(fleet_a, "host-1")
    version = server(secret).body["version"]
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(server, secret, after=version, wait="30")
        _until(_parked(1), "the long-poll to wait")
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'ctxlake-change-feed'"
                " AND datname = current_database()"  # not another test worker's
            )
            assert cur.fetchone() == (True,)
        _until(lambda: not FEED.listening(), "the listener to notice")
        workers.render_fleet(fleet_a)
        woke = waiting.result()
    # 200, not the 204 a wait that ran out answers: woken by the catch-up
    assert woke.status == 200 and woke.body["version"] != version
    assert FEED.listening()


def test_a_waiter_holds_no_database_connection(
    server: Callable[..., Answer], fleet_a: Fleet
) -> None:
    secrets = [_secret(fleet_a, f"host-{i}") for i in range(4)]
    assert server(secrets[0], after="none", wait="0").status == 204  # listener up
    before = _connections()
    with ThreadPoolExecutor(4) as pool:
        waiting = [pool.submit(server, s, after="none", wait="30") for s in secrets]
        _until(_parked(4), "four long-polls to wait")
        # a waiter is counted from its ticket, a moment before it closes its connection:
        # wait for the four to give theirs back (the listener's one is allowed), while all
        # four are still parked — a waiter that kept its connection fails this after 30 s
        _until(lambda: _connections() <= before + 1,
               "the parked waiters to hold no database connection (one for the listener)")
        assert FEED.counts()[0] == 4
        workers.render_fleet(fleet_a)
        assert {f.result().status for f in waiting} == {200}


@pytest.mark.parametrize(("role", "flood_size"), [("integration", 500), ("host", 2000)])
def test_too_many_long_polls_from_one_token_get_429_and_others_keep_working(
    server: Callable[..., Answer],
    fleet_a: Fleet,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    role: str,
    flood_size: int,
) -> None:
    """A host token (one per agent host, so its waiters are a whole host's) is bounded
    exactly like any other token.

    The parked long-polls wait for the render however long the flood takes (a busy
    machine took over MAX_WAIT_SECS for 2,000 requests, and a poll that timed out freed
    its place for a flood request): their wait is real, only its timeout is stretched.
    """
    settings.CTXLAKE_LONGPOLL_PER_TOKEN, settings.CTXLAKE_LONGPOLL_WAITERS = 2, 3
    wait = FEED.wait
    monkeypatch.setattr(FEED, "wait", lambda ticket, after, timeout: wait(ticket, after, HOLD))
    flood = tokens.issue_token(fleet_a, role=role, name="flood").secret
    other, third = (_secret(fleet_a, n) for n in ("other", "third"))
    version = server(flood).body["version"]
    with ThreadPoolExecutor(24) as pool:
        held = [pool.submit(server, flood, HOLD + 60, after=version, wait="30") for _ in range(2)]
        try:
            _until(_parked(2), "the token's two long-polls to wait")
            refused = [
                pool.submit(server, flood, after=version, wait="30") for _ in range(flood_size)
            ]
            answers = [f.result() for f in refused]
            assert {a.status for a in answers} == {429}
            # Past CTXLAKE_API_RATE_PER_MINUTE (1200) the token's rate limit answers first:
            # a 429 too, with its own Retry-After; either way a clear reason and no waiter.
            feed = [a for a in answers if "long-poll(s) waiting" in a.body["detail"]]
            rate = [a for a in answers if "throttled" in a.body["detail"]]
            assert len(feed) + len(rate) == flood_size and feed
            assert all(a.headers["Retry-After"] == str(change_feed.MAX_WAIT_SECS) for a in feed)
            assert all(int(a.headers["Retry-After"]) > 0 for a in rate)
            assert FEED.counts() == (2, 1)  # the refused left nothing behind
            theirs: Future[Answer] = pool.submit(server, other, HOLD + 60, after=version, wait="30")
            _until(_parked(3), "another token's long-poll to wait")
            full = server(third, after=version, wait="30")
            assert full.status == 429 and "server process" in full.body["detail"]
        finally:  # wakes the parked polls, so a failure above never waits out HOLD
            workers.render_fleet(fleet_a)
        assert [f.result().status for f in [*held, theirs]] == [200, 200, 200]
    assert FEED.counts() == (0, 0)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"after": "\x00"}, "after"),
        ({"after": "v" * 129}, "after"),
        ({"after": "v" * 100_000}, "after"),
        ({"after": "\u00e9t\u00e9-\U0001f600"}, "after"),
        ({"after": "v\u202e1"}, "after"),
        ({"after": "two words"}, "after"),
        ({"after": "v1", "wait": "-1"}, "wait"),
        ({"after": "v1", "wait": "1e309"}, "wait"),
        ({"after": "v1", "wait": "abc"}, "wait"),
        ({"after": "v1", "wait": "31"}, "wait"),
        ({"after": "v1", "wait": "nan"}, "wait"),
        ({"after": "v1", "have": '"' + "a" * 39 + '"'}, "have"),
        ({"after": "v1", "have": '"' + "A" * 40 + '"'}, "have"),
        ({"after": "v1", "have": ",".join(['"' + "a" * 40 + '"'] * 7)}, "have"),
        ({"after": "v1", "have": '"' + "a" * 40 + '",'}, "have"),
        ({"after": "v1", "have": '"' + "a" * 40 + '"\x00'}, "have"),
        ({"after": "v1", "have": '"' + "a" * 40 + '"\r\nX-Evil: 1'}, "have"),
        ({"after": "v1", "have": "\u00e9" * 100_000}, "have"),
    ],
)
def test_it_refuses_hostile_parameters_with_a_clear_400(
    api_as: ApiAs, world: World, query: dict[str, str], field: str
) -> None:
    response = api_as(world.ada).get(f"/api/v1/fleets/{world.fleet.slug}/changes", query)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field] and response.json()[field][0]
    assert FEED.counts() == (0, 0)


def _connections() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cur.fetchone()[0])
