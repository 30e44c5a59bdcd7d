"""Reading a unix-socket peer's whole message: one definition for the bridge's sockets.

The shared embedder's client (embed_service) and the hook door (hook_door) both take one
message per connection, ended by the peer's shutdown, and must not buffer without bound.
"""

from __future__ import annotations

import socket


def read_to_end(sock: socket.socket, limit: int) -> bytes:
    """Everything the peer sends until it shuts down, or the first chunks past `limit`
    bytes (the caller refuses a result longer than `limit`). The socket's timeout applies
    to each read."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
