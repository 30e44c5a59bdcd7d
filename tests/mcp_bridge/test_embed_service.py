"""The host's shared query embedder: real bridge processes over stdio, a real service
process on a real Unix socket, the real model.

What must hold: the first bridge that needs the model loads it and serves it; the next
bridge asks it and never loads onnxruntime itself, with the same answers; when the
serving bridge exits, the next search takes over; racing bridges load the model once; a
hostile or confused client gets an error and the service keeps serving; a service
process goes away when idle; when no one can answer in time the search is lexical and
says so, never an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mcp_bridge import embed_service, socket_io
from mcp_bridge.config import Config
from mcp_bridge.contract import embed
from tests.mcp_bridge.stdio import INIT, ROOT, bridge_env, call

SEARCH = "clippy gate RUSTFLAGS"


def _pids(home: Path) -> list[int]:
    return embed_service.running(home)


@pytest.fixture
def home(live: Config) -> Iterator[Path]:
    yield live.home
    for pid in _pids(live.home):
        os.kill(pid, signal.SIGTERM)


def _env(cfg: Config, **extra: str) -> dict[str, str]:
    return bridge_env(cfg, **{"CTXLAKE_HOME": str(cfg.home), "CTXLAKE_EMBED_SHARED": "on",
                              "CTXLAKE_EMBED_IDLE_SECS": "60", **extra})


class Bridge:
    """One real bridge process, kept open across calls (a session)."""

    def __init__(self, cfg: Config, **extra: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "mcp_bridge"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=_env(cfg, **extra))
        self.n = 1
        self.send(INIT)

    def send(self, data: bytes) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(data)
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def search(self, query: str = SEARCH) -> dict[str, Any]:
        self.n += 1
        reply = self.send(call(self.n, "memory_search", {"query": query}))
        return reply["result"]["structuredContent"]

    def maps(self) -> str:
        return Path(f"/proc/{self.proc.pid}/maps").read_text()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def end(self) -> None:
        """End the session as a client does: close stdin, and the bridge exits."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(60) == 0


def test_the_first_bridge_serves_the_model_and_the_next_asks_it(live: Config,
                                                                 home: Path) -> None:
    first = Bridge(live)
    try:
        out = first.search()
        assert out["mode"] == "hybrid", out.get("note")
        assert "onnxruntime" in first.maps()  # it found no service: it became it
        assert embed_service.socket_path(home, embed.NAME).is_socket()
        assert _pids(home) == []  # no process of its own
        second = Bridge(live)
        try:
            again = second.search()
            assert again["mode"] == "hybrid" and again["results"] == out["results"]
            assert "onnxruntime" not in second.maps()  # asked the first bridge
            first.close()  # the serving bridge's session ends
            after = second.search()
            assert after["mode"] == "hybrid" and after["results"] == out["results"]
            assert "onnxruntime" in second.maps()  # the next search took over
            socket_file = embed_service.socket_path(home, embed.NAME)
            assert socket_file.is_socket()
            second.end()
            assert not socket_file.exists()  # a serving bridge's exit takes its socket
        finally:
            second.close()
    finally:
        first.close()
    mine = embed_service.query_vector(home, embed.NAME, embed.DIMS, SEARCH)
    assert np.allclose(mine, embed.embed_query(SEARCH), atol=1e-6)


def test_racing_bridges_load_the_model_once(live: Config, home: Path) -> None:
    """Three first searches at once: one bridge takes the service's lock and loads the
    model; the others wait for its socket (up to START_WAIT_SECS: on a slow machine they
    may search lexically once, and say so) and never load it."""
    bridges = [Bridge(live) for _ in range(3)]
    try:
        for b in bridges:  # every request sent before any answer is read
            assert b.proc.stdin is not None
            b.n += 1
            b.proc.stdin.write(call(b.n, "memory_search", {"query": SEARCH}))
            b.proc.stdin.flush()
        for b in bridges:
            assert b.proc.stdout is not None
            out = json.loads(b.proc.stdout.readline())["result"]["structuredContent"]
            assert out["results"]
            assert out["mode"] == "hybrid" or "embedder is starting" in out["note"], out
        assert sum("onnxruntime" in b.maps() for b in bridges) == 1
        assert _pids(home) == []
        for b in bridges:  # the model loaded, every bridge's next search is hybrid
            assert b.search()["mode"] == "hybrid"
        assert sum("onnxruntime" in b.maps() for b in bridges) == 1
    finally:
        for b in bridges:
            b.close()


def test_a_bridge_serving_the_model_is_fair_and_stops_serving_when_its_home_goes(
    live: Config, home: Path,
) -> None:
    """The same service in a bridge: a client dripping bytes at it is cut off and delays
    no other bridge's search; with its home deleted it stops serving (the socket is
    gone) and still answers its own searches."""
    server = Bridge(live)
    other = Bridge(live)
    try:
        assert server.search()["mode"] == "hybrid"
        path = embed_service.socket_path(home, embed.NAME)
        drip = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        _connect(drip, path)
        drip.sendall(b'{"v": 1,')  # and nothing more: the rest never comes
        out = other.search()
        assert out["mode"] == "hybrid", out.get("note")
        drip.settimeout(30)
        assert b"did not arrive within" in drip.recv(4096)
        drip.close()
        assert "onnxruntime" not in other.maps()
    finally:
        other.close()
    try:
        import shutil

        lock = embed_service.socket_path(home, embed.NAME).with_suffix(".lock")
        assert _holds(server, lock)
        shutil.rmtree(embed_service.run_dir(home))
        deadline = time.monotonic() + 60
        while _holds(server, lock):  # its thread closes the lock once it sees the socket gone
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert server.search()["mode"] == "hybrid"  # embedded in its own process
        assert server.proc.poll() is None
    finally:
        server.close()


def _holds(bridge: Bridge, lock: Path) -> bool:
    """Whether the bridge process has `lock` open (deleted or not)."""
    fds = Path(f"/proc/{bridge.proc.pid}/fd")
    targets = []
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            targets.append(os.readlink(fd))
    return any(t.startswith(str(lock)) for t in targets)


def test_when_the_service_cannot_come_up_the_search_is_lexical_and_says_so(
    live: Config, home: Path,
) -> None:
    import fcntl

    path = embed_service.socket_path(home, embed.NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    held = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(held, fcntl.LOCK_EX)  # a service that never listens: each start leaves
    bridge = Bridge(live)
    try:
        out = bridge.search()
        assert out["mode"] == "lexical" and out["results"]
        assert "shared embedder is starting" in out["note"]
    finally:
        bridge.close()
        os.close(held)


def _connect(s: socket.socket, path: Path) -> None:
    """Connect as a bridge does: a deep test home's socket path is longer than an address
    holds (pytest-xdist's temporary folders are)."""
    with socket_io.address(path) as address:
        s.connect(address)


def _raw(path: Path, payload: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(20)
        _connect(s, path)
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return json.loads(data.partition(b"\n")[0])


@pytest.mark.parametrize(("payload", "error"), [
    (b"not json\n", "not JSON"),
    (b"[" * 50_000 + b"\n", "not JSON"),
    (json.dumps({"v": 2, "model": embed.NAME, "text": "x"}).encode() + b"\n", "protocol"),
    (json.dumps({"v": 1, "model": "other", "text": "x"}).encode() + b"\n", "this service runs"),
    (json.dumps({"v": 1, "model": embed.NAME, "text": "a\x00b"}).encode() + b"\n", "NUL"),
    (json.dumps({"v": 1, "model": embed.NAME, "text": "\ud800"}).encode() + b"\n",
     "cannot embed"),
    (json.dumps({"v": 1, "model": embed.NAME, "text": 10**400}).encode() + b"\n", "non-empty"),
    (b"x" * (embed_service.MAX_REQUEST_BYTES + 10), "one JSON line"),
    (b"\xff\xfe\n", "not JSON"),
])
def test_hostile_requests_get_an_error_and_the_service_keeps_serving(
    live: Config, home: Path, payload: bytes, error: str,
) -> None:
    embed_service.query_vector(home, embed.NAME, embed.DIMS, "warm")  # starts it
    path = embed_service.socket_path(home, embed.NAME)
    assert error in _raw(path, payload)["error"]
    vector = embed_service.query_vector(home, embed.NAME, embed.DIMS, "still serving")
    assert vector.shape == (embed.DIMS,)


def test_a_stale_socket_file_is_replaced_and_the_idle_service_exits(live: Config,
                                                                    home: Path) -> None:
    path = embed_service.socket_path(home, embed.NAME)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("left by a crash")  # not a socket
    env = _env(live, CTXLAKE_EMBED_IDLE_SECS="2")
    service = subprocess.Popen([sys.executable, "-m", "mcp_bridge", "embedder"], cwd=ROOT,
                               env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not path.is_socket():
        assert time.monotonic() < deadline and service.poll() is None
        time.sleep(0.05)
    assert embed_service.query_vector(home, embed.NAME, embed.DIMS, "hello").shape == (
        embed.DIMS,)
    second = subprocess.run([sys.executable, "-m", "mcp_bridge", "embedder"], cwd=ROOT,
                            env=env, timeout=60)
    assert second.returncode == 0  # another holds the lock: it leaves at once
    assert service.wait(30) == 0  # idle for 2 s: it exits
    assert not path.exists()
    assert b"idle for 2 s: exiting" in service.stderr.read()  # type: ignore[union-attr]


def test_a_bad_idle_setting_is_named_and_the_default_used(live: Config, home: Path) -> None:
    env = _env(live, CTXLAKE_EMBED_IDLE_SECS="soon")
    service = subprocess.Popen([sys.executable, "-m", "mcp_bridge", "embedder"], cwd=ROOT,
                               env=env, stderr=subprocess.PIPE)
    try:
        line = service.stderr.readline()  # type: ignore[union-attr]
        assert b"bad setting: CTXLAKE_EMBED_IDLE_SECS='soon'" in line
    finally:
        service.kill()
        service.wait(10)


def test_the_help_names_the_real_idle_default() -> None:
    from mcp_bridge.config import ENV_HELP

    assert f"default {embed_service.IDLE_SECS}" in ENV_HELP[embed_service.IDLE_ENV]
    assert embed_service.SHARED_ENV in ENV_HELP


def test_a_client_dripping_bytes_delays_no_one_and_is_cut_off(live: Config, home: Path) -> None:
    """Three clients send a byte every 0.2 s and never finish a line (a per-read timeout
    would wait for them forever, and the service used to serve one client at a time):
    meanwhile ordinary requests are answered, and each dripping client is cut off with
    the deadline error."""
    import threading

    embed_service.query_vector(home, embed.NAME, embed.DIMS, "warm")  # starts it
    path = embed_service.socket_path(home, embed.NAME)
    stop, said = threading.Event(), []

    def drip() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            _connect(s, path)
            s.settimeout(0.2)
            while not stop.is_set():
                try:
                    s.sendall(b"{")
                    said.append(s.recv(4096))
                    return
                except TimeoutError:
                    continue
                except OSError:
                    said.append(b"closed")
                    return

    drips = [threading.Thread(target=drip) for _ in range(3)]
    for t in drips:
        t.start()
    try:
        for i in range(5):  # each would wait behind the drips on a one-at-a-time service
            assert embed_service.query_vector(home, embed.NAME, embed.DIMS,
                                              f"ordinary {i}").shape == (embed.DIMS,)
        for t in drips:
            t.join(timeout=60)
        assert len(said) == 3 and all(b"did not arrive within" in s for s in said), said
    finally:
        stop.set()


def test_the_service_exits_when_its_home_is_deleted(live: Config, home: Path) -> None:
    import shutil

    embed_service.query_vector(home, embed.NAME, embed.DIMS, "warm")  # starts it
    assert _pids(home)
    shutil.rmtree(home)
    deadline = time.monotonic() + 60
    while _pids(home) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _pids(home), "the embedder outlived its deleted home"


def test_two_hundred_at_once_are_all_answered_and_past_max_open_one_is_told_busy(
        live: Config, home: Path) -> None:
    """200 concurrent requests (126 were refused before issue 29) are all answered; with
    MAX_OPEN requests open and unfinished, the next client is refused at once with "busy",
    and once they are gone the service answers again."""
    from concurrent.futures import ThreadPoolExecutor

    embed_service.query_vector(home, embed.NAME, embed.DIMS, "warm")  # starts it
    with ThreadPoolExecutor(200) as pool:
        vectors = list(pool.map(lambda i: embed_service.query_vector(
            home, embed.NAME, embed.DIMS, f"concurrent query {i}"), range(200)))
    assert all(v.shape == (embed.DIMS,) for v in vectors)

    path = embed_service.socket_path(home, embed.NAME)
    request = json.dumps({"v": embed_service.PROTOCOL, "model": embed.NAME,
                          "text": "one more"}).encode() + b"\n"
    replies = []
    for _attempt in range(5):  # the held ones expire after 1 s: a slow machine may try again
        held = []
        try:
            for _ in range(embed_service.MAX_OPEN):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                _connect(s, path)
                s.sendall(b"{")  # a request line that never ends
                held.append(s)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(60)
                _connect(probe, path)
                probe.sendall(request)
                replies.append(probe.recv(4096).split(b"\n")[0])
        finally:
            for s in held:
                s.close()
        if b"busy" in replies[-1]:
            break
    busy = f"busy: {embed_service.MAX_OPEN} requests are open; retry".encode()
    assert busy in replies[-1], replies
    # "Once they are gone": the service sees the held connections close on its next
    # passes; until then a request is still refused (busy, or reset when the refusal
    # closed before reading it). Wait for that event, never a fixed time.
    deadline, refusals = time.monotonic() + 60, []
    while True:
        try:
            after = embed_service.query_vector(home, embed.NAME, embed.DIMS, "after")
            break
        except embed_service.Unavailable as e:
            refusals.append(str(e))
            assert time.monotonic() < deadline, refusals[-3:]
            time.sleep(0.05)
    assert after.shape == (embed.DIMS,)


def test_the_service_computes_the_vector_while_the_bridge_takes_its_lexical_list(
    live: Config, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request goes out before the lexical list is taken and its answer is read only
    after it: the service computes the vector without the bridge waiting on it (the answer
    arrives on the socket while the bridge is still in its lexical step)."""
    from mcp_bridge import snapshot, tools

    monkeypatch.setenv(embed_service.SHARED_ENV, "on")
    embed_service.query_vector(home, embed.NAME, embed.DIMS, "warm")  # starts it
    asked: list[embed_service.Asked] = []
    real_ask, real_lexical = embed_service.ask, snapshot.Snapshot._lexical
    answered_during_lexical: list[bool] = []

    def ask(*args: Any, **kwargs: Any) -> embed_service.Asked:
        asked.append(real_ask(*args, **kwargs))
        return asked[-1]

    def lexical(self: Any, *args: Any) -> Any:
        found = real_lexical(self, *args)
        sock = asked[-1]._sock
        assert sock is not None  # sent, not read yet
        readable, _, _ = select.select([sock], [], [], 30)  # the answer arrives meanwhile
        answered_during_lexical.append(bool(readable))
        return found

    monkeypatch.setattr(embed_service, "ask", ask)
    monkeypatch.setattr(snapshot.Snapshot, "_lexical", lexical)
    out = tools.memory_search(tools.Bridge.from_config(live), SEARCH)

    assert out["mode"] == "hybrid", out.get("note")
    assert answered_during_lexical == [True]
    assert asked[0]._sock is None  # read and closed
    monkeypatch.setattr(snapshot.Snapshot, "_lexical", real_lexical)
    monkeypatch.setenv(embed_service.SHARED_ENV, "off")
    alone = tools.memory_search(tools.Bridge.from_config(live), SEARCH)
    assert [r["id"] for r in alone["results"]] == [r["id"] for r in out["results"]]


def test_a_bridge_that_cannot_load_the_model_to_serve_it_searches_lexically(
    live: Config, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No service on the host and a broken model install: the search is lexical and says
    why, never an error, and the service's lock is left for the next taker."""
    from mcp_bridge import tools

    def broken(text: str) -> Any:
        raise RuntimeError("no model here")

    monkeypatch.setenv(embed_service.SHARED_ENV, "on")
    monkeypatch.setattr(embed, "embed_query", broken)
    out = tools.memory_search(tools.Bridge.from_config(live), SEARCH)
    assert out["mode"] == "lexical" and out["results"]
    assert "the query embedder failed to load (RuntimeError)" in out["note"]
    assert not embed_service.hosting()
    import fcntl

    lock = embed_service.socket_path(home, embed.NAME).with_suffix(".lock")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: raises if still held
    finally:
        os.close(fd)


def test_a_home_too_deep_for_a_socket_address_still_shares_its_embedder(
    live: Config, tmp_path: Path,
) -> None:
    """A socket address holds 107 bytes; a deeper $CTXLAKE_HOME reaches its socket
    through a descriptor of the socket's folder (it answered "AF_UNIX path too long", and
    every search there was lexical)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    path = embed_service.socket_path(deep, embed.NAME)
    assert len(os.fsencode(path)) > socket_io.MAX_SOCKET_PATH
    try:
        vector = embed_service.query_vector(deep, embed.NAME, embed.DIMS, SEARCH,
                                            start_wait=60)
        assert np.allclose(vector, embed.embed_query(SEARCH), atol=1e-6)
        assert path.is_socket()  # where it is expected, at its full path
    finally:
        for pid in embed_service.running(deep):
            os.kill(pid, signal.SIGTERM)
