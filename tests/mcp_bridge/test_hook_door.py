"""The hook door: a running bridge answers the PreToolUse script (mcp_bridge.hook_door).

A real bridge process listens; requests are sent to its socket as the script sends them,
hostile ones included. What the script prints through the door is byte for byte what it
prints on its own (tests/mcp_bridge/test_pretooluse.py runs every hook case both ways);
here: the door survives bad input, stale and silent doors cost the script its speed and
never its answer, and a late answer and the script's own make one event id, not two.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge import hook_door, pretool
from mcp_bridge.contract import places
from mcp_bridge.contract.ids import derived_uuid
from tests.mcp_bridge.test_pretooluse import (
    FLEET,
    SCRIPT,
    _edit,
    _spooled,
    repo,  # noqa: F401 - the fixture
    start_bridge,
    stop_bridge,
)

pytestmark = pytest.mark.usefixtures("repo")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def bridge(home: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = start_bridge(home)
    try:
        yield proc
    finally:
        stop_bridge(proc, home)


def _env(home: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "CTXLAKE_FLEET_ID": FLEET, "CTXLAKE_AGENT_ID": "ada",
            "CTXLAKE_HOME": str(home), "CTXLAKE_CACHE_DIR": str(home.parent / "cache")}


def _request(root: Path, home: Path, **change: Any) -> dict[str, Any]:
    body = {"v": hook_door.PROTOCOL, "checkout": pretool.CHECKOUT, "call": "ab" * 16,
            "argv": [], "cwd": str(root), "parent": os.getpid(), "env": _env(home),
            "input": _edit(root, "src/payments/api.py")}
    return {**body, **change}


def _send(sock_path: Path, raw: bytes, *, shut: bool = True) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(str(sock_path))
        s.sendall(raw)
        if shut:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return dict(json.loads(b"".join(chunks)))


def _door(home: Path, proc: subprocess.Popen[bytes]) -> Path:
    return home / "run" / "hooks" / f"{proc.pid}.sock"


def _script(root: Path, home: Path, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(SCRIPT, input=json.dumps(body), capture_output=True, text=True,
                          env=_env(home), cwd=root, timeout=60)


def test_the_script_and_the_door_speak_one_protocol() -> None:
    assert pretool.DOOR_PROTOCOL == hook_door.PROTOCOL
    assert pretool.contract_module("places").hook_doors({"CTXLAKE_HOME": "/h"}) == \
        places.hook_doors({"CTXLAKE_HOME": "/h"}) == "/h/run/hooks"


def test_the_door_is_the_users_own(home: Path, bridge: subprocess.Popen[bytes]) -> None:
    door = _door(home, bridge)
    assert stat.S_IMODE(door.parent.stat().st_mode) == 0o700
    assert stat.S_ISSOCK(door.stat().st_mode)
    assert stat.S_IMODE(door.stat().st_mode) & 0o077 == 0


def test_a_door_directory_left_open_to_others_is_closed_again(home: Path) -> None:
    doors = home / "run" / "hooks"
    doors.mkdir(parents=True)
    doors.chmod(0o777)
    proc = start_bridge(home)
    try:
        assert stat.S_IMODE(doors.stat().st_mode) == 0o700
    finally:
        stop_bridge(proc, home)


HOSTILE: dict[str, bytes] = {
    "NUL bytes": b'{"v": 1\x00}',
    "invalid UTF-8": b'{"v": "\xff\xfe"}',
    "a lone surrogate as UTF-8": b'{"v": "\xed\xa0\x80"}',
    "deep nesting": b"[" * 100_000 + b"]" * 100_000,
    "a huge number": b'{"v": ' + b"9" * 5000 + b"}",
    "not an object": b"[1, 2]",
    "empty": b"",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_bad_bytes_get_an_error_and_the_door_stays_open(
    name: str, repo: Path, home: Path, bridge: subprocess.Popen[bytes]  # noqa: F811
) -> None:
    door = _door(home, bridge)
    assert "error" in _send(door, HOSTILE[name])
    reply = _send(door, json.dumps(_request(repo, home)).encode())
    assert "leased by bo" in reply["stdout"]


BAD_FIELDS: dict[str, dict[str, Any]] = {
    "another protocol": {"v": 2},
    "another checkout": {"checkout": "/elsewhere"},
    "an option the script never sends": {"argv": ["--format", "plain"]},
    "input not an object": {"input": ["Edit"]},
    "env with a number": {"env": {"CTXLAKE_HOME": 1}},
    "a relative cwd": {"cwd": "repo"},
    "a pid that is a bool": {"parent": True},
    "a huge pid": {"parent": 10**30},
    "a call id with a slash": {"call": "../" * 8},
    "a lone surrogate in env": {"env": {"CTXLAKE_FLEET_ID": "\ud800"}},
}


@pytest.mark.parametrize("name", sorted(BAD_FIELDS))
def test_bad_fields_are_refused_and_nothing_is_spooled(
    name: str, repo: Path, home: Path, bridge: subprocess.Popen[bytes]  # noqa: F811
) -> None:
    request = _request(repo, home, **BAD_FIELDS[name])
    reply = _send(_door(home, bridge), json.dumps(request).encode())
    if "error" not in reply:  # a surrogate fleet id is answered: with the hook's own note
        assert reply["stdout"] == "" and "not checking leases" in reply["stderr"]
    assert _spooled(repo) == []


def test_an_oversized_request_is_refused(repo: Path, home: Path,  # noqa: F811
                                         bridge: subprocess.Popen[bytes]) -> None:
    request = _request(repo, home, env={"BIG": "x" * (hook_door.MAX_REQUEST + 10)})
    assert "over" in _send(_door(home, bridge), json.dumps(request).encode())["error"]
    assert _spooled(repo) == []


def test_a_silent_client_holds_the_door_for_its_deadline_only(
    repo: Path, home: Path, bridge: subprocess.Popen[bytes]  # noqa: F811
) -> None:
    door = _door(home, bridge)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
        idle.connect(str(door))  # says nothing, never shuts down
        reply = _send(door, json.dumps(_request(repo, home)).encode())
    assert "leased by bo" in reply["stdout"]


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(done.stdout)


def test_a_stale_door_costs_the_script_nothing_and_the_next_bridge_clears_it(
    repo: Path, home: Path  # noqa: F811
) -> None:
    doors = home / "run" / "hooks"
    doors.mkdir(parents=True)
    stale = doors / f"{_dead_pid()}.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))  # a bridge SIGKILLed: its socket file stays, nobody listens
    s.close()
    done = _script(repo, home, _edit(repo, "src/payments/api.py"))
    assert "leased by bo" in done.stdout and done.returncode == 0
    assert len(_spooled(repo)) == 1
    proc = start_bridge(home)
    try:
        assert not stale.exists()
    finally:
        stop_bridge(proc, home)


def test_a_late_answer_and_the_scripts_own_are_one_event(
    repo: Path, home: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """A door that records the intrusion but answers after the script gave up: the script
    runs the hook itself under the same call id, so both lines carry one event id, and
    the drain applies an id once (tests/site/test_drain.py counts the second a duplicate)."""
    doors = home / "run" / "hooks"
    doors.mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(doors / f"{os.getpid()}.sock"))
    server.listen(1)
    requests: list[dict[str, Any]] = []

    def slow_door() -> None:
        conn, _ = server.accept()
        with conn:
            raw = b""
            while chunk := conn.recv(65536):
                raw += chunk
            requests.append(json.loads(raw))
            hook_door.answer(requests[-1])  # the intrusion is spooled ...
            time.sleep(pretool.DOOR_REPLY_SECS + 2)  # ... and the answer comes too late

    thread = threading.Thread(target=slow_door, daemon=True)
    thread.start()
    try:
        done = _script(repo, home, _edit(repo, "src/payments/api.py"))
    finally:
        server.close()
    assert "leased by bo" in done.stdout
    first, second = _spooled(repo)
    assert first["id"] == second["id"] == derived_uuid(requests[0]["call"], "bo")
    assert first["payload"] == second["payload"]


def test_a_home_too_deep_for_a_socket_gets_no_door(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    assert hook_door.HookDoor.open({"CTXLAKE_HOME": str(deep)}) is None
    assert not (deep / "run").exists()
