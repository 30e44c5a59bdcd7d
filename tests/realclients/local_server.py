"""What every scripted stand-in server shares: a ThreadingHTTPServer on 127.0.0.1 started and
stopped as a context manager, and a lock-guarded record of the requests it saw."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self


class LocalServer:
    """Mixin for a dataclass with `requests`, `_lock` and `_server` fields; `handler` is the
    module's request handler class, which reads the stand-in as its `owner`."""

    handler: ClassVar[type[BaseHTTPRequestHandler]]
    thread_name: ClassVar[str] = "standin"
    requests: list[Any]
    _lock: threading.Lock
    _server: ThreadingHTTPServer | None

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
