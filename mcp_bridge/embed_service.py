"""One query embedder per host, shared by every bridge.

Every agent session runs its own bridge, and the embedder is most of a bridge's memory
(onnxruntime and the model: ~60 of a hybrid bridge's ~120 MiB at 10k claims). So one
process per host holds it and serves the others the query's vector over a Unix socket in
$CTXLAKE_HOME/run/ (a 0700 directory): with N sessions on a host that is one model
instead of N, and a new session's first hybrid search does not pay the model's load.

- The service is a bridge (`host`): the first bridge that needs a vector and finds no
  service loads the model itself, embeds its own queries in its process from then on,
  and serves the other bridges from a daemon thread for as long as it runs. A bridge
  alone on a host then holds what a bridge embedding in process holds (1.98–2.01×
  bridge-db's peak RSS beside 2.51–2.52× for a bridge plus a service process,
  docs/bridge.md) and skips the socket for its own queries. When it exits, the next
  bridge to search takes over. A flock held for the service's life makes every other
  taker ask instead, so racing bridges load the model once; while the holder is still
  loading, a bridge waits up to START_WAIT_SECS, then searches lexically and says so.
- Or a process of its own, `python -m mcp_bridge embedder`: what `query_vector` and
  `ask` start, detached, for callers that are not bridges (benchmarks, an operator);
  bridges use it when it is up.
- The service is per model: its socket is named by the embedder's NAME, every answer
  carries NAME and DIMS, and a bridge uses a vector only when both are its own.
- A service process exits after IDLE_SECS without a request (CTXLAKE_EMBED_IDLE_SECS),
  so a host that stops searching gets its memory back; a bridge serves for its own life.
  Either stops serving within CHECK_SECS when its socket or its $CTXLAKE_HOME is removed.
- It is fair: every client is read at once, each has READ_DEADLINE_SECS from connecting
  to send its request line (a client dripping bytes is cut off, never waited for), and
  past MAX_OPEN open requests a client is refused at once with "busy".
- CTXLAKE_EMBED_SHARED=off keeps the embedder in the bridge process and serves no one.

Protocol, one request per connection: the client sends one JSON line
`{"v": 1, "model": NAME, "text": "..."}` (at most MAX_REQUEST_BYTES); the service answers
one JSON line `{"name": NAME, "dims": DIMS}` followed by DIMS little-endian float32, or
`{"error": "..."}`. Stdlib only on the client side; the service imports the embedder.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import json
import logging
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from mcp_bridge import socket_io
from mcp_bridge.contract import places

PROTOCOL = 1
MAX_REQUEST_BYTES = 64 * 1024
START_WAIT_SECS = 3.0
CONNECT_TIMEOUT_SECS = 2.0
IDLE_SECS = 1800
SHARED_ENV = "CTXLAKE_EMBED_SHARED"
IDLE_ENV = "CTXLAKE_EMBED_IDLE_SECS"

log = logging.getLogger("mcp_bridge")
_hosting = threading.Lock()
_hosted = False  # this process took the host's service (host): its model is loaded here


class Unavailable(Exception):
    """No vector from the shared service; the message says why (for the search's note)."""


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(SHARED_ENV, "on").strip().lower() not in ("off", "0", "no", "false")


def run_dir(home: Path) -> Path:
    return Path(home) / places.RUN_SUBDIR


def socket_path(home: Path, model: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model)[:60]
    return run_dir(home) / f"embedder-{safe}.sock"


# -- the client: what a bridge calls ---------------------------------------------------------

def query_vector(home: Path, model: str, dims: int, text: str, *,
                 start_wait: float = START_WAIT_SECS) -> Any:
    """The vector of `text` from the host's service (started if absent), as numpy float32.

    Raises Unavailable when it cannot answer in time; the caller then searches lexically.
    """
    with ask(home, model, dims, text, start_wait=start_wait) as asked:
        return asked.vector()


def ask(home: Path, model: str, dims: int, text: str, *,
        start_wait: float = START_WAIT_SECS, serve_here: bool = False) -> Asked:
    """Send `text` to the host's service now and read its vector later (`Asked.vector`):
    the service computes it while the caller does something else (a bridge takes its
    lexical list meanwhile, ~0.1–4 ms at 10k claims, which waited for the ~3 ms vector).
    If no service answers the connection, `vector()` makes this process the service
    (`serve_here`, what a bridge asks for: `host`) or starts one, and asks again."""
    path = socket_path(home, model)
    try:
        return Asked(model, dims, _send(path, model, text))
    except (FileNotFoundError, ConnectionRefusedError):  # absent, or a dead one's socket
        again = _host_or_ask if serve_here else _start_and_ask
        return Asked(model, dims, later=lambda: again(home, path, model, dims, text,
                                                      start_wait))
    except Unavailable as e:
        return Asked(model, dims, refused=e)


class Asked:
    """One request to the service, its answer not read yet. Close it (or use it as a
    context manager) if `vector()` is never called: it holds the connection."""

    def __init__(self, model: str, dims: int, sock: socket.socket | None = None, *,
                 later: Callable[[], Asked] | None = None, ready: Any = None,
                 refused: Unavailable | None = None) -> None:
        """One of: `sock`, the request sent and its answer unread; `later`, no service
        answered yet, so `vector()` asks again through it; `ready`, the vector this process
        computed itself (it became the service); `refused`, why there is no answer."""
        self.model, self.dims = model, dims
        self._sock, self._later, self._ready, self._refused = sock, later, ready, refused

    def __enter__(self) -> Asked:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def vector(self) -> Any:
        """The answer as numpy float32; Unavailable when there is none in time."""
        if self._refused is not None:
            raise self._refused
        if self._ready is not None:
            return self._ready
        if self._later is not None:
            later, self._later = self._later, None
            with later() as again:
                return again.vector()
        if self._sock is None:
            raise Unavailable("the shared embedder's answer was already read")
        try:
            return _receive(self._sock, self.model, self.dims)
        finally:
            self.close()


def _start_and_ask(home: Path, path: Path, model: str, dims: int, text: str,
                   start_wait: float) -> Asked:
    start(home)
    return Asked(model, dims, _ask_when_up(path, model, text, start_wait))


def _host_or_ask(home: Path, path: Path, model: str, dims: int, text: str,
                 start_wait: float) -> Asked:
    """No service answered: this process becomes it and computes the vector itself, or,
    while another holds the service's lock (loading the model), asks that one once it
    listens."""
    from mcp_bridge.contract import embed

    try:
        if host(home):
            return Asked(model, dims, ready=embed.embed_query(text))
    except Exception as e:  # a broken model install: this search is lexical, never an error
        raise Unavailable(f"the query embedder failed to load ({type(e).__name__})") from None
    return Asked(model, dims, _ask_when_up(path, model, text, start_wait))


def _ask_when_up(path: Path, model: str, text: str, start_wait: float) -> socket.socket:
    deadline = time.monotonic() + start_wait
    while True:
        try:
            return _send(path, model, text)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() >= deadline:
                raise Unavailable("the host's shared embedder is starting; this search is "
                                  "lexical, the next ones hybrid") from None
            time.sleep(0.05)


def _send(path: Path, model: str, text: str) -> socket.socket:
    """A connection to the service at `path` with the request sent, its answer unread."""
    request = json.dumps({"v": PROTOCOL, "model": model, "text": text}).encode() + b"\n"
    if len(request) > MAX_REQUEST_BYTES:
        raise Unavailable("the query is too long for the shared embedder")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(CONNECT_TIMEOUT_SECS)
        try:
            with socket_io.address(path) as address:
                s.connect(address)
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise FileNotFoundError(str(path)) from None
            if e.errno in (errno.ECONNREFUSED, errno.ENOTSOCK):
                raise ConnectionRefusedError(str(path)) from None
            raise Unavailable(f"the shared embedder cannot be reached "
                              f"({e.strerror or e})") from None
        try:
            s.sendall(request)
        except OSError as e:
            raise Unavailable(f"the shared embedder did not answer ({e})") from None
    except BaseException:
        s.close()
        raise
    return s


def _receive(s: socket.socket, model: str, dims: int) -> Any:
    import numpy as np

    try:
        data = socket_io.read_to_end(s, 4096 + 4 * dims)
    except OSError as e:
        raise Unavailable(f"the shared embedder did not answer ({e})") from None
    head, _, body = data.partition(b"\n")
    try:
        meta = json.loads(head)
    except ValueError:
        raise Unavailable("the shared embedder's answer is not understood") from None
    if not isinstance(meta, dict) or "error" in meta:
        raise Unavailable(f"the shared embedder refused: {str(meta)[:200]}")
    if (meta.get("name"), meta.get("dims")) != (model, dims) or len(body) != 4 * dims:
        raise Unavailable(f"the shared embedder runs {meta.get('name')!r}/{meta.get('dims')!r}, "
                          f"not {model}/{dims}")
    vector = np.frombuffer(body, dtype="<f4").astype(np.float32)
    vector.setflags(write=False)
    return vector


def running(home: Path) -> list[int]:
    """The pids of embedder services whose CTXLAKE_HOME is `home` (Linux /proc; [] where
    it cannot be read): what tests and benchmarks stop, and check are gone."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"embedder" in cmd and f"CTXLAKE_HOME={home}".encode() in env:
            found.append(int(entry.name))
    return found


def start(home: Path) -> int | None:
    """Start the service detached (it exits at once if one already holds the lock)."""
    folder = run_dir(home)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        log = os.open(folder / "embedder.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        return None
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", ""))
                                        if p)
    env["CTXLAKE_HOME"] = str(home)
    try:
        child = subprocess.Popen([sys.executable, "-m", "mcp_bridge", "embedder"],
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                 start_new_session=True, close_fds=True)
    except OSError:
        return None
    finally:
        os.close(log)
    return child.pid


# -- the service -----------------------------------------------------------------------------

def serve(home: Path, *, idle_secs: float = IDLE_SECS) -> int:
    """Run the service until IDLE_SECS pass without a request, or its socket or home is
    gone. 0 also when another runs."""
    from mcp_bridge.contract import embed

    taken = _take(home, embed)
    if taken is None:
        return 0  # another service holds it
    _log(f"serving {embed.NAME} on {taken.path} (pid {os.getpid()})")
    _log(_serve_until_gone(taken, embed, idle_secs))
    return 0


def host(home: Path) -> bool:
    """Make this process the host's service, unless another already is: load the model,
    listen, and serve on a daemon thread for the process's life (or until the socket or
    home is gone). True when this process holds the model as the service (now or
    before); False when another process holds the service's lock."""
    global _hosted
    from mcp_bridge.contract import embed

    with _hosting:
        if _hosted:
            return True
        taken = _take(home, embed)
        if taken is None:
            return False
        _hosted = True
    # at exit too: a killed process leaves its socket, which the next taker replaces
    atexit.register(taken.unlink_socket)

    def run() -> None:
        why = _serve_until_gone(taken, embed, math.inf)
        log.info("stopped serving the host's embedder: %s", why)

    threading.Thread(target=run, name="ctxlake-embed-service", daemon=True).start()
    log.info("serving the host's embedder %s on %s from this bridge", embed.NAME, taken.path)
    return True


def hosting() -> bool:
    """True once this process took the host's service: its model is loaded here, so its
    own queries are embedded here, not asked of itself over the socket."""
    return _hosted


@dataclass(frozen=True)
class _Taken:
    """The service as one process holds it: the listening socket, its path and inode
    (which socket file is ours), and the lock held for the service's life."""

    server: socket.socket
    path: Path
    inode: int
    lock: int

    def unlink_socket(self) -> None:
        """Remove our socket file, never another's: the lock keeps anyone else from
        binding one there while we hold it, but a file can be replaced by hand."""
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self.inode:
                self.path.unlink()


def _take(home: Path, embed: Any) -> _Taken | None:
    """The service taken: its lock held, the model loaded (the first answer is then
    fast), its socket listening in place of whatever a dead service left there. None
    when another process holds the lock."""
    import fcntl

    run_dir(home).mkdir(parents=True, exist_ok=True, mode=0o700)
    path = socket_path(home, embed.NAME)
    lock = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        return None
    server: socket.socket | None = None
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        embed.embed_query("warm up")
        path.unlink(missing_ok=True)
        with socket_io.address(path) as address:
            server.bind(address)
        os.chmod(path, 0o600)
        server.listen(LISTEN_BACKLOG)
        inode = path.stat().st_ino
    except BaseException:  # the lock goes back with the socket: the next taker may load
        if server is not None:
            server.close()
        os.close(lock)
        raise
    return _Taken(server, path, inode, lock)


def _serve_until_gone(taken: _Taken, embed: Any, idle_secs: float) -> str:
    """Serve until idle, or the socket or home is gone; then give the socket and the lock
    up. Why it stopped."""
    try:
        with taken.server:
            return _Loop(taken, embed).run(idle_secs)
    finally:
        taken.unlink_socket()
        os.close(taken.lock)


#: A client has this long, from connecting, to send its whole request line: a client that
#: drips bytes is cut off instead of holding the service (others are read meanwhile).
READ_DEADLINE_SECS = 1.0
#: Requests read or waiting for the model at once; past it a client is refused at once.
MAX_OPEN = 256
LISTEN_BACKLOG = 512
#: How often the service checks that its socket and home still exist.
CHECK_SECS = 1.0


class _Open:
    """One client connection being read."""

    def __init__(self, conn: socket.socket, deadline: float) -> None:
        self.conn, self.deadline, self.raw = conn, deadline, b""


class _Loop:
    """Reads every client at once (a selector), answers complete requests one at a time
    (the model is one), and cuts off a client past its READ_DEADLINE_SECS."""

    def __init__(self, taken: _Taken, embed: Any) -> None:
        import selectors

        self.server, self.path, self.inode = taken.server, taken.path, taken.inode
        self.embed = embed
        self.sel = selectors.DefaultSelector()
        self.events = selectors.EVENT_READ
        self.reading: dict[socket.socket, _Open] = {}
        self.ready: list[tuple[socket.socket, bytes | None]] = []
        self.server.setblocking(False)
        self.sel.register(self.server, self.events)

    def run(self, idle_secs: float) -> str:
        last = checked = time.monotonic()
        while True:
            now = time.monotonic()
            if now - checked >= CHECK_SECS:
                checked = now
                if not self._still_ours():
                    return "its socket or home is gone: exiting"
            if not self.reading and not self.ready and now - last >= idle_secs:
                return f"idle for {idle_secs:.0f} s: exiting"
            for key, _ in self.sel.select(0 if self.ready else self._wait(now)):
                if key.fileobj is self.server:
                    self._accept(now)
                else:
                    self._read(cast(socket.socket, key.fileobj))
            self._expire(time.monotonic())
            if self.ready:
                conn, line = self.ready.pop(0)
                self._send(conn, _reply(line, self.embed))
                last = time.monotonic()

    def _wait(self, now: float) -> float:
        soonest = min((o.deadline for o in self.reading.values()), default=now + CHECK_SECS)
        return max(0.0, min(CHECK_SECS, soonest - now))

    def _still_ours(self) -> bool:
        try:
            return self.path.stat().st_ino == self.inode
        except OSError:
            return False

    def _accept(self, now: float) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except (BlockingIOError, InterruptedError):
                return
            if len(self.reading) + len(self.ready) >= MAX_OPEN:
                # take what the client already sent: a socket closed with unread data is
                # reset, and the client would read the reset instead of the refusal
                with contextlib.suppress(OSError):
                    conn.setblocking(False)
                    conn.recv(MAX_REQUEST_BYTES + 1)
                self._send(conn, _error(f"busy: {MAX_OPEN} requests are open; retry"))
                continue
            conn.setblocking(False)
            self.reading[conn] = _Open(conn, now + READ_DEADLINE_SECS)
            self.sel.register(conn, self.events)

    def _read(self, conn: socket.socket) -> None:
        entry = self.reading[conn]
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        entry.raw += chunk
        if b"\n" in entry.raw or not chunk or len(entry.raw) > MAX_REQUEST_BYTES:
            self._done_reading(conn)
            self.ready.append((conn, entry.raw.partition(b"\n")[0]
                               if b"\n" in entry.raw else None))

    def _expire(self, now: float) -> None:
        for conn in [c for c, o in self.reading.items() if o.deadline <= now]:
            self._done_reading(conn)
            self._send(conn, _error(f"the request line did not arrive within "
                                    f"{READ_DEADLINE_SECS:.0f} s"))

    def _done_reading(self, conn: socket.socket) -> None:
        del self.reading[conn]
        self.sel.unregister(conn)

    @staticmethod
    def _send(conn: socket.socket, reply: bytes) -> None:
        with conn:
            try:
                conn.settimeout(CONNECT_TIMEOUT_SECS)
                conn.sendall(reply)
            except OSError:
                return  # the client went away; nothing to do


def _error(why: str) -> bytes:
    return json.dumps({"error": why}).encode() + b"\n"


def _reply(line: bytes | None, embed: Any) -> bytes:
    error = _error
    if line is None:
        return error(f"send one JSON line of at most {MAX_REQUEST_BYTES} bytes")
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):
        return error("the request is not JSON")
    if not isinstance(request, dict) or request.get("v") != PROTOCOL:
        return error(f"protocol {PROTOCOL} requests only")
    text = request.get("text")
    if request.get("model") != embed.NAME:
        return error(f"this service runs {embed.NAME}")
    if not isinstance(text, str) or not text.strip() or "\x00" in text:
        return error("text must be a non-empty string without NUL")
    try:
        text.encode("utf-8")  # a lone surrogate is refused here, not in the tokenizer
        vector = embed.embed_query(text)
    except (UnicodeEncodeError, ValueError) as e:
        return error(f"cannot embed this text ({type(e).__name__})")
    head = json.dumps({"name": embed.NAME, "dims": embed.DIMS}).encode() + b"\n"
    return head + cast(bytes, vector.astype("<f4").tobytes())  # embed: the module, untyped


def _log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sys.stderr.write(f"{stamp} ctxlake embedder: {message}\n")
    sys.stderr.flush()


def main(argv: list[str], *, command: str = "embedder") -> int:
    from mcp_bridge.config import Config

    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cfg_home = Config.from_env().home
    raw = os.environ.get(IDLE_ENV, "").strip()
    idle = float(IDLE_SECS)
    if raw:
        try:
            idle = float(raw)
            if not 1 <= idle <= 7 * 86_400:
                raise ValueError
        except ValueError:
            _log(f"bad setting: {IDLE_ENV}={raw[:40]!r} is not a number of seconds in "
                 f"1..604800; using {IDLE_SECS}")
            idle = float(IDLE_SECS)
    return serve(cfg_home, idle_secs=idle)
