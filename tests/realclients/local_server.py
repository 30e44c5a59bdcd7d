"""What every scripted stand-in server shares: a ThreadingHTTPServer on 127.0.0.1 started and
stopped as a context manager, a lock-guarded record of the requests it saw, the script's
closing `Say` and how a request finds its step, and the handler's JSON plumbing.

Each stand-in (messages_standin for Claude Code, responses_standin for Codex, chat_standin
for Hermes) keeps what its API spells differently: the tool steps, where a request carries
the answered call ids, the reply and error shapes."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import KW_ONLY, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

#: What a request outside the agent loop (a title, a summary) is answered with.
SIDE_REPLY = "ok"


@dataclass(frozen=True)
class Say:
    """The model answers with text and ends its turn."""

    text: str


@dataclass(frozen=True)
class Recorded:
    """One HTTP request the client made; each stand-in subclasses it to read its API."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def route(self) -> str:
        """The path without its query string."""
        return self.path.split("?", 1)[0]

    def dump(self) -> str:
        """The whole body as text, for "does the client send X anywhere" checks."""
        return json.dumps(self.body, ensure_ascii=False)


def step_index(script: Sequence[object], answered: Collection[str],
               call_id: Callable[[int], str]) -> int:
    """The script step an agent-loop request is answered with: the first tool step (any
    step but a Say) past as many as the request answers, else the closing Say. It counts
    the answered calls rather than reading the last one, so a retried request gets the
    same answer."""
    tools = [i for i, s in enumerate(script) if not isinstance(s, Say)]
    done = sum(1 for i in tools if call_id(i) in answered)
    return tools[done] if done < len(tools) else len(script) - 1


@dataclass
class LocalServer:
    """Base of a stand-in: the `script` it plays (each stand-in narrows its type) and what
    it saw; `handler` is the module's request handler class, which reads the stand-in as
    its `owner`."""

    handler: ClassVar[type[BaseHTTPRequestHandler]]
    thread_name: ClassVar[str] = "standin"
    script: Sequence[object]
    _: KW_ONLY
    requests: list[Any] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def __post_init__(self) -> None:
        if not self.script or not isinstance(self.script[-1], Say):
            raise ValueError("a script ends with a Say: the turn must end")

    @property
    def address(self) -> str:
        """http://127.0.0.1:PORT of the running server."""
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        handler = type("Handler", (self.handler,), {"owner": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name=self.thread_name,
                         daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def record(self, request: Any) -> None:
        with self._lock:
            self.requests.append(request)

    def recorded(self, keep: Callable[[Any], bool]) -> list[Any]:
        """The requests seen so far that `keep` accepts, in order."""
        with self._lock:
            return [r for r in self.requests if keep(r)]


class JsonHandler(BaseHTTPRequestHandler):
    """A stand-in's handler: quiet, records every request as its `record_type`, reads
    JSON bodies and answers JSON or server-sent events."""

    owner: LocalServer
    record_type: ClassVar[type[Recorded]] = Recorded
    #: Headers every JSON or event-stream answer carries besides the content headers.
    reply_headers: ClassVar[tuple[tuple[str, str], ...]] = ()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib's name
        pass  # the test inspects `requests`; stderr stays quiet

    def error(self, kind: str, text: str) -> dict[str, Any]:
        """The API's error body."""
        return {"error": {"type": kind, "message": text}}

    def _record(self, body: Any) -> Recorded:
        request = self.record_type(self.command, self.path,
                                {k.lower(): v for k, v in self.headers.items()}, body)
        self.owner.record(request)
        return request

    def _read(self) -> Recorded | None:
        """The request with its JSON body, recorded; None once a 400 has answered a body
        that is not JSON (recorded without one)."""
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._record(None)
            self._json(400, self.error("invalid_request_error", "body is not JSON"))
            return None
        return self._record(body)

    def _json(self, status: int, value: dict[str, Any]) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, text in self.reply_headers:
            self.send_header(name, text)
        self.end_headers()
        self.wfile.write(data)

    def _start_events(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        for name, text in self.reply_headers:
            self.send_header(name, text)
        self.end_headers()
