"""`sync` against a live test server: pull with ETags, push with acks, and the bad days.

The server is pytest-django's live_server (a real HTTP server thread over the test
database); the host side is mcp_bridge.sync with its own cache and spool directories.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ctxlake_site import workers
from fleet import change_feed, leases, tokens
from fleet.models import Agent, Fleet, InboxEvent, Lease
from mcp_bridge import contract, sync
from mcp_bridge.cache import Cache
from mcp_bridge.contract.spool import Spool, read_events
from tests.mcp_bridge.stdio import ROOT


@dataclass
class Host:
    cache: Path
    spool: Path
    remote: sync.Remote
    token_file: Path
    fleet: Fleet
    agent: Agent
    token: Any

    def spool_writer(self, agent: str = "ada") -> Spool:
        return Spool(self.spool, fleet=self.fleet.slug, agent=agent, session="s-host")

    def roster(self) -> Any:
        return Cache(self.cache / self.fleet.slug, fleet=self.fleet.slug).read(contract.ROSTER)


@pytest.fixture
def host(transactional_db: None, live_server: Any, tmp_path: Path, settings: Any,
         monkeypatch: pytest.MonkeyPatch, fleet_a: Fleet, ada: Agent) -> Host:
    server = tmp_path / "server"
    settings.CTXLAKE_CACHE_DIR, settings.CTXLAKE_SPOOL_DIR = server / "cache", server / "spool"
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(server / "cache"))  # the drain and render
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(server / "spool"))
    workers.render_fleet(fleet_a)
    issued = tokens.issue_token(fleet_a, role="agent", name="host-1", agent=ada)
    token_file = tmp_path / "token"
    token_file.write_text(issued.secret + "\n")
    token_file.chmod(0o600)
    remote = sync.Remote(live_server.url, fleet_a.slug, issued.secret, timeout=5)
    return Host(tmp_path / "host" / "cache", tmp_path / "host" / "spool", remote, token_file,
                fleet_a, ada, issued.token)


def test_it_pulls_the_whole_cache_then_304s_until_the_server_renders_again(host: Host) -> None:
    first = sync.pull(host.remote, host.cache)
    assert contract.MANIFEST in first.changed and contract.ROSTER in first.changed
    assert first.changed[-1] == contract.MANIFEST  # applied last
    assert host.roster().value["agents"] == []
    assert sync.pull(host.remote, host.cache).unchanged  # the manifest's ETag: 304
    leases.claim_paths(host.agent, ["src/**"], ttl=timedelta(minutes=30))
    workers.render_fleet(host.fleet)
    again = sync.pull(host.remote, host.cache)
    assert contract.ROSTER in again.changed and not again.unchanged
    assert host.roster().value["agents"][0]["leases"][0]["path"] == "src/**"
    assert not list((host.cache / host.fleet.slug).glob(".*.tmp"))


def test_a_pull_fetches_the_changed_files_at_once(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each download waits (up to 10 s) for a second one to start: one after the other, the
    first would wait alone and the pull would have taken the sum of the responses."""
    real, started, company = sync._download, [], threading.Event()

    def download(*args: Any, **kwargs: Any) -> Any:
        started.append(args[1])
        if len(started) >= 2:
            company.set()
        waited.append(company.wait(timeout=10))
        return real(*args, **kwargs)

    waited: list[bool] = []
    monkeypatch.setattr(sync, "_download", download)
    first = sync.pull(host.remote, host.cache)
    assert len(started) >= 3 and all(waited), (started, waited)
    assert first.changed[-1] == contract.MANIFEST  # still applied last
    assert host.roster().value["agents"] == []


def test_it_pushes_the_spool_and_forgets_only_acknowledged_lines(host: Host) -> None:
    writer = host.spool_writer()
    first = writer.append("lease.claim", {"paths": ["src/a.py"], "reason": "r", "ttl_secs": 600})
    foreign = host.spool_writer(agent="bo").append(  # this token speaks for ada only
        "lease.claim", {"paths": ["src/b.py"], "reason": "r", "ttl_secs": 600})
    late: list[str] = []
    real_open = host.remote.open

    def open_and_race(tail: str, **kw: Any) -> Any:
        response = real_open(tail, **kw)
        if tail == "spool":  # an agent appends while the POST is in flight
            late.append(writer.append("lease.release", {"paths": [], "all": True}).event_id)
        return response

    host.remote.open = open_and_race  # type: ignore[method-assign]
    report = sync.push(host.remote, host.spool)
    assert (report.sent, report.acknowledged) == (2, 1)
    assert [e["id"] for e in read_events(host.spool, host.fleet.slug)] == late  # kept
    rejected = (host.spool / "rejected" / f"{host.fleet.slug}.ndjson").read_text()
    assert foreign.event_id in rejected and "speaks for agent ada" in rejected
    waiting = InboxEvent.objects.filter(fleet=host.fleet).values_list("event_id", flat=True)
    assert [str(e) for e in waiting] == [first.event_id]  # in the server's inbox, not a file
    assert workers.drain_spool().applied == 1
    assert Lease.objects.active().get().path == "src/a.py"


def test_server_down_keeps_the_spool_and_the_loop_backs_off(host: Host) -> None:
    host.spool_writer().append("lease.release", {"paths": [], "all": True})
    down = sync.Remote("http://127.0.0.1:9", host.fleet.slug, "ctx_x", timeout=1)
    with pytest.raises(sync.ServerDown):
        sync.sync_once(down, host.cache, host.spool)
    assert len(read_events(host.spool, host.fleet.slug)) == 1
    waits: list[float] = []
    logged: list[str] = []
    code = sync.run_loop(down, host.cache, host.spool, interval=2, log=logged.append,
                         sleep=waits.append, cycles=4)
    assert code == 0 and len(read_events(host.spool, host.fleet.slug)) == 1
    assert waits[0] < waits[1] < waits[2] and all(w <= sync.MAX_BACKOFF * 1.2 for w in waits)
    assert "spool kept" in logged[0]


@pytest.fixture
def feed() -> Iterator[change_feed.Feed]:
    yield change_feed.FEED
    change_feed.FEED.stop()  # its LISTEN connection would outlive the test


def test_the_loop_pulls_as_soon_as_the_server_publishes_a_render(
    host: Host, feed: change_feed.Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """...and with the listing the feed sent, never asking GET cache/manifest for it, nor
    GET for a small file: the feed sends those the host lacks (only the snapshot is
    downloaded, by the first pull)."""
    asked: list[object] = []
    real_listing, real_download = sync._listing, sync._download
    monkeypatch.setattr(sync, "_listing", lambda *a: asked.append(a) or real_listing(*a))
    downloaded: list[str] = []
    monkeypatch.setattr(sync, "_download",
                        lambda *a: downloaded.append(a[1]) or real_download(*a))
    slept: list[float] = []
    codes: list[int] = []
    loop = threading.Thread(target=lambda: codes.append(sync.run_loop(
        host.remote, host.cache, host.spool, interval=600, log=len, sleep=slept.append,
        cycles=2)))
    loop.start()
    deadline = time.monotonic() + 30
    while feed.counts()[0] != 1:  # pulled once, now waiting on the feed
        assert loop.is_alive() and time.monotonic() < deadline, codes
        time.sleep(0.02)
    assert host.roster().value["agents"] == []
    leases.claim_paths(host.agent, ["src/**"], ttl=timedelta(minutes=30))
    workers.render_fleet(host.fleet)
    loop.join(timeout=60)  # far below the 600 s interval: only the feed can have woken it
    assert not loop.is_alive() and codes == [0]
    assert host.roster().value["agents"][0]["leases"][0]["path"] == "src/**"
    assert slept == []  # never fell back to sleeping
    assert asked == []  # both pulls started from the feed's listing
    assert downloaded == [contract.SNAPSHOT]
    root = host.cache / host.fleet.slug
    state = json.loads((root / sync.STATE_FILE).read_text())
    assert sorted(state["files"].values()) == sync.held_etags(root)  # what it names next


@pytest.mark.parametrize("listing", [
    None, [], "files", {"files": "roster.json"}, {"files": [["roster.json", '"e"']]},
    {"files": [{"name": 7, "etag": '"e"'}]}, {"files": [{"name": "roster.json", "etag": 7}]},
    {"files": [{"name": "roster.json", "etag": '"e"\r\nX-Evil: 1'}]},
    {"files": [{"name": "roster.json", "etag": '"\u00e9"'}]},
    {"files": [{"name": "roster.json", "etag": '"e"'}], "etag": "\x00"},
    {"files": [{"name": "roster.json", "etag": '"e"'}]},  # no etag of its own
])
def test_a_malformed_listing_from_the_feed_is_ignored(listing: Any) -> None:
    """A listing the pull cannot trust (a file's ETag goes back into a header) is dropped:
    the pull asks GET cache/manifest instead, as with a server that sends none."""
    with _feed_server({"version": "v2", "listing": listing}) as remote:
        assert sync.changed(remote, "v1", 0) == ("v2", None)


@contextlib.contextmanager
def _feed_server(answer: Any) -> Iterator[sync.Remote]:
    """A stand-in server whose change feed answers `answer` to every GET."""
    class Feed(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server hook
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Feed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield sync.Remote(f"http://127.0.0.1:{server.server_port}", "f", "t", timeout=5)
    finally:
        server.shutdown()
        server.server_close()


_ROSTER = b'{"agents": []}'
_ROSTER_ETAG = contract.etag_of(hashlib.sha256(_ROSTER).hexdigest())


@pytest.mark.parametrize(("files", "whole"), [
    ({"roster.json": _ROSTER.decode()}, {"roster.json": _ROSTER}),
    ({"roster.json": '{"agents": [1]}'}, {}),  # not the bytes the listing names
    ({"roster.json": _ROSTER.decode() + " "}, {}),
    ({"roster.json": {"agents": []}}, {}),  # parsed, not the file
    ({"roster.json": "\ud800"}, {}),  # a lone surrogate encodes to no file
    ({"roster.json": "\x00" * 10}, {}),
    ({"snapshot.sqlite": _ROSTER.decode()}, {}),  # never inlined
    ({"handoffs.json": _ROSTER.decode()}, {}),  # not listed
    ({"../roster.json": _ROSTER.decode()}, {}),
    ([_ROSTER.decode()], {}), ("roster", {}), (None, {}),
])
def test_only_whole_inlined_files_are_taken(files: Any, whole: dict[str, bytes]) -> None:
    """A body that is not the bytes its listed ETag names (or not text, or a file the
    contract does not inline) is dropped: the pull GETs that file instead."""
    listing = {"etag": '"m"', "files": [{"name": "roster.json", "etag": _ROSTER_ETAG},
                                        {"name": "snapshot.sqlite", "etag": _ROSTER_ETAG}]}
    with _feed_server({"version": "v2", "listing": listing, "files": files}) as remote:
        change = sync.changed(remote, "v1", 0, have=[])
    assert change is not None and change[1] is not None
    assert change[1].bodies == whole


def test_a_host_names_only_the_contracts_files_it_holds(tmp_path: Path) -> None:
    """What a later server may list beyond the contract's files, or a state file gone
    wrong, is not named: `have` stays within what the server accepts (else a 400 would
    turn the change feed off)."""
    etag = [contract.etag_of(f"{i:x}" * 64) for i in range(9)]
    names = [contract.MANIFEST, *contract.CACHE_FILES, "extra.json", "../roster.json"]
    for name in [*names[:-1], "missing.json"]:
        (tmp_path / name).write_text("{}")
    (tmp_path / contract.BRIEFING).unlink()  # listed, but not held any more
    state = {"files": {**dict(zip(names, etag, strict=False)), contract.HISTORY: "\"e\""}}
    (tmp_path / sync.STATE_FILE).write_text(json.dumps(state))
    held = sync.held_etags(tmp_path)
    assert held == sorted(etag[i] for i, name in enumerate(names[:6])
                          if name not in (contract.BRIEFING, contract.HISTORY))
    (tmp_path / sync.STATE_FILE).write_text("[1, 2]")
    assert sync.held_etags(tmp_path) == []


def test_without_a_change_feed_the_loop_sleeps_out_its_interval(
    host: Host, feed: change_feed.Feed
) -> None:
    """An older server (404 on changes) or a refusal: poll every interval, as before."""
    logged: list[str] = []
    slept: list[float] = []
    elsewhere = sync.Remote(host.remote.server, "not-this-tokens-fleet", host.remote.token)
    push = sync.Push(elsewhere, logged.append, slept.append, version="v1")
    push.wait(7)
    assert not push.available and len(slept) == 1 and 6 < slept[0] <= 7
    assert "no change feed" in logged[0] and "polling instead" in logged[0]
    push.wait(7)  # and it does not ask again
    assert len(slept) == 2 and len(logged) == 1


def test_a_full_server_makes_the_loop_poll_this_round_and_ask_again_the_next(
    host: Host, feed: change_feed.Feed, settings: Any
) -> None:
    settings.CTXLAKE_LONGPOLL_PER_TOKEN = 1
    version = sync.changed_version(host.remote, None, 0)
    assert version is not None
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(sync.changed_version, host.remote, version, 30)
        deadline = time.monotonic() + 30
        while feed.counts()[0] != 1:
            assert time.monotonic() < deadline and not held.done()
            time.sleep(0.02)
        slept: list[float] = []
        push = sync.Push(host.remote, len, slept.append, version=version)
        push.wait(9)  # 429: Retry-After is 30 s, the round has 9 left
        assert push.available and len(slept) == 1 and 8 < slept[0] <= 9
        workers.render_fleet(host.fleet)
        assert held.result() not in (None, version)  # the one held was served all along


def _sync_cli(host: Host, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command, in its own process: the test process's env is the server's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CTXLAKE_") or k == "CTXLAKE_EMBED_SHARED"}
    env.update(PYTHONPATH=str(ROOT), CTXLAKE_CACHE_DIR=str(host.cache),
               CTXLAKE_SPOOL_DIR=str(host.spool))
    return subprocess.run(
        [sys.executable, "-m", "mcp_bridge", "sync", "--fleet", host.fleet.slug, "--server",
         host.remote.server, "--token-file", str(host.token_file), *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)


def test_a_revoked_token_stops_sync_with_a_clear_error(host: Host) -> None:
    tokens.revoke_token(host.token)
    once = _sync_cli(host, "--once")
    assert once.returncode == 2 and "revoked" in once.stderr
    looping = _sync_cli(host, "--interval", "1")  # the loop stops too, it does not retry
    assert looping.returncode == 2 and "sync stopped" in looping.stderr


def test_once_reports_what_it_did(host: Host) -> None:
    host.spool_writer().append("lease.release", {"paths": [], "all": True})
    done = _sync_cli(host, "--once")
    assert done.returncode == 0, done.stderr
    assert "pushed 1/1 event(s)" in done.stdout and "manifest.json" in done.stdout
    assert read_events(host.spool, host.fleet.slug) == []


def test_once_exits_non_zero_when_the_server_refused_lines(host: Host) -> None:
    """The bug: a second agent's writes on a one-agent token vanished with exit status 0."""
    host.spool_writer().append("lease.release", {"paths": [], "all": True})
    foreign = host.spool_writer(agent="bo").append("lease.release", {"paths": [], "all": True})
    done = _sync_cli(host, "--once")
    assert done.returncode == sync.UNDELIVERED_EXIT, done.stdout + done.stderr
    assert "pushed 1/2 event(s), 1 rejected" in done.stdout
    (line,) = done.stderr.splitlines()
    assert "1 line(s) NOT delivered" in line and "speaks for agent ada" in line
    assert str(host.spool / "rejected" / f"{host.fleet.slug}.ndjson") in line
    kept = (host.spool / "rejected" / f"{host.fleet.slug}.ndjson").read_text()
    assert foreign.event_id in kept
    # The bridge on this host says so too, in fleet_status.
    from mcp_bridge import tools
    from mcp_bridge.config import Config

    cfg = Config.from_env({"CTXLAKE_CACHE_DIR": str(host.cache),
                           "CTXLAKE_SPOOL_DIR": str(host.spool),
                           "CTXLAKE_FLEET_ID": host.fleet.slug, "CTXLAKE_AGENT_ID": "ada"})
    status = tools.Bridge.from_config(cfg).call("fleet_status", {})
    assert status["spool"]["rejected_lines"] == 1
    assert "speaks for agent ada" in status["spool"]["last_rejection"]
    assert status["spool"]["unsent_lines"] == 0 and status["cache_age_secs"] is not None
    again = _sync_cli(host, "--once")  # nothing new refused: a clean run is 0 again
    assert again.returncode == 0, again.stderr


class _Truncating(http.server.BaseHTTPRequestHandler):
    """A server whose roster.json download dies half-way (Content-Length says more)."""

    listing: dict[str, Any] = {}

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.endswith("/cache/manifest"):
            body = json.dumps(self.listing).encode()
            self._send(200, body, len(body), etag='"new"')
        elif self.path.endswith("/cache/roster.json"):
            self._send(200, b'{"format_version": 1, "agents": [', 500)
        else:
            self._send(404, b"{}", 2)

    def _send(self, code: int, body: bytes, length: int, etag: str = '"x"') -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", etag)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def truncating() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Truncating)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_interrupted_download_leaves_the_old_cache_whole(host: Host, truncating: str) -> None:
    sync.pull(host.remote, host.cache)
    root = host.cache / host.fleet.slug
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    _Truncating.listing = {"files": [
        {"name": n, "etag": '"changed"'} for n in (contract.ROSTER, contract.MANIFEST)]}
    cut = sync.Remote(truncating, host.fleet.slug, "ctx_x", timeout=5)
    with pytest.raises(sync.ServerDown, match="cut short"):
        sync.pull(cut, host.cache)
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before  # no temp, no change
    assert host.roster().value["agents"] == []


def test_a_listing_without_bodies_shares_no_writable_default() -> None:
    from mcp_bridge.sync import Listing

    first, second = Listing("etag", {}), Listing("etag", {})
    with pytest.raises(TypeError):
        first.bodies["snapshot.sqlite"] = b"x"  # type: ignore[index]
    assert dict(second.bodies) == {}
