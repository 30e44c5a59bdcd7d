"""A running bridge answers its session's PreToolUse hooks over a unix socket.

Why: an edit inside another agent's lease, and a `git commit` while other agents hold
leases, cannot be answered by the hook script's cheap checks (mcp_bridge/pretool.py). In
a fresh interpreter the full hook imports json, pathlib, typing, the contract and the
spool (~25 ms, 3.7-4.3x a bare `python -c pass`; issue 26 allows 2x). The session's
bridge is already running with all of it loaded. So each bridge listens on
`$CTXLAKE_HOME/run/hooks/<pid>.sock` (contract.places.hook_doors), and the script sends
it what it read — its argv, the hook JSON, its directory, its parent's pid and its
environment — and prints what comes back.

The answer is the same code's as in the script: `hooks.pre_tool_use` runs on the
script's input with a Config made from the script's environment (session lookup from the
script's parent), git in the script's environment, and the script's call id naming the
intrusion events. A bridge that is not listening, refuses, runs another checkout, or
answers late leaves the script to run the hook itself; the call id makes a late answer's
intrusion and the script's own the same event, which the drain applies once.

The socket is the user's own: its directory is created 0700 and a request is data,
never code. One connection at a time, each with a deadline and a size cap, on a daemon
thread of its own, so a tool call in progress never delays a hook and a silent client
holds the door for at most DEADLINE_SECS.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

from mcp_bridge import pretool, socket_io
from mcp_bridge.contract import places

log = logging.getLogger("mcp_bridge")
PROTOCOL = pretool.DOOR_PROTOCOL
DEADLINE_SECS = 2.0  # for a client to send its request; it sends it at once
MAX_REQUEST = pretool.MAX_STDIN + (256 << 10)  # the hook JSON and an environment
SUFFIX = pretool.DOOR_SUFFIX


class Refused(ValueError):
    """A request the door will not answer; the script then runs the hook itself."""


def answer(request: Any) -> dict[str, str]:
    """What the hook script would have written: {"stdout": ..., "stderr": ...}."""
    from mcp_bridge import hooks
    from mcp_bridge.config import Config

    if not isinstance(request, dict) or request.get("v") != PROTOCOL:
        raise Refused(f"not a protocol {PROTOCOL} request")
    if request.get("checkout") != pretool.CHECKOUT:
        raise Refused("the script runs another checkout than this bridge")
    argv, hook_input = request.get("argv"), request.get("input")
    env, cwd, parent = request.get("env"), request.get("cwd"), request.get("parent")
    call_id = request.get("call")
    if not (isinstance(argv, list) and set(argv) <= {"--strict"}):
        raise Refused("argv is not [] or [--strict]")
    if not isinstance(hook_input, dict):
        raise Refused("input is not a JSON object")
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str)
                                          for k, v in env.items())):
        raise Refused("env is not an object of strings")
    if not (isinstance(cwd, str) and os.path.isabs(cwd)):
        raise Refused("cwd is not an absolute path")
    if not (isinstance(parent, int) and not isinstance(parent, bool) and 0 < parent < 1 << 31):
        raise Refused("parent is not a pid")
    if not (isinstance(call_id, str) and 16 <= len(call_id) <= 64 and call_id.isalnum()):
        raise Refused("call is not an id")
    err = io.StringIO()
    out = hooks.pre_tool_use(Config.from_env(env, parent=parent), {**hook_input, "cwd": cwd},
                             strict="--strict" in argv, call_id=call_id, env=env, err=err)
    return {"stdout": out, "stderr": err.getvalue()}


class HookDoor:
    """The listening socket of one bridge process, served on a daemon thread."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, f"{os.getpid()}{SUFFIX}")
        self.sock: socket.socket | None = None

    @classmethod
    def open(cls, env: Mapping[str, str] | None = None) -> HookDoor | None:
        """Listen for this bridge's hooks; None (logged) where it cannot, which costs the
        hooks their speed, never their answer."""
        door = cls(places.hook_doors(env))
        if len(os.fsencode(door.path)) > socket_io.MAX_SOCKET_PATH:
            log.info("no hook door: %s is longer than a unix socket path may be", door.path)
            return None
        try:
            directory = os.path.dirname(door.path)
            os.makedirs(directory, mode=0o700, exist_ok=True)
            if os.stat(directory).st_uid != os.getuid():
                raise PermissionError(f"{directory} belongs to another user")
            os.chmod(directory, 0o700)  # made earlier with wider permissions: not any more
            _clear_stale(directory)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(door.path)  # a dead process with our pid left it
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o077)
            try:
                sock.bind(door.path)
            finally:
                os.umask(old)
            sock.listen(8)
        except OSError as e:
            log.info("no hook door at %s: %s", door.path, e)
            return None
        door.sock = sock
        threading.Thread(target=door.serve, name="ctxlake-hook-door", daemon=True).start()
        return door

    def serve(self) -> None:
        assert self.sock is not None
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the bridge is leaving
                return
            with conn:
                self.handle(conn)

    def handle(self, conn: socket.socket) -> None:
        """Read one request (to the client's shutdown), write one answer; never raise."""
        try:
            conn.settimeout(DEADLINE_SECS)
            raw = socket_io.read_to_end(conn, MAX_REQUEST)
            try:
                if len(raw) > MAX_REQUEST:
                    raise Refused(f"request over {MAX_REQUEST} bytes")
                reply: dict[str, str] = answer(json.loads(raw))
            except (Refused, ValueError, RecursionError) as e:
                reply = {"error": f"{type(e).__name__}: {e}"}
            conn.sendall(json.dumps(reply, ensure_ascii=True).encode())
        except Exception as e:  # noqa: BLE001 - a hook's failure must not end the door
            log.warning("hook door: %s: %s", type(e).__name__, e)

    def close(self) -> None:
        """Stop listening and remove the socket file (at the bridge's exit)."""
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            self.sock = None


def _clear_stale(directory: str) -> None:
    """Remove the sockets of bridges that are gone (SIGKILLed: no exit to clean up)."""
    for name in os.listdir(directory):
        pid = name.removesuffix(SUFFIX)
        if not (name.endswith(SUFFIX) and pid.isdigit()) or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
        except PermissionError:
            pass  # alive, someone else's
