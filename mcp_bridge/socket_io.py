"""The bridge's unix sockets: one definition of their address limit and of reading a
peer's whole message.

The shared embedder (embed_service) and the hook door (hook_door) both live under
$CTXLAKE_HOME/run/, whose depth the user chooses, and both take one message per
connection, ended by the peer's shutdown, and must not buffer without bound.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

#: The longest path a unix socket address holds: sun_path is 108 bytes on Linux and 104 on
#: macOS, one of them the NUL that ends it.
MAX_SOCKET_PATH = 103 if sys.platform == "darwin" else 107


@contextlib.contextmanager
def address(path: Path) -> Iterator[str]:
    """`path` as a socket address to bind or connect: itself, or, when it is longer than an
    address holds (a deep $CTXLAKE_HOME), the same file reached through a descriptor of its
    folder (/proc/self/fd/N/name, Linux). Without this a deep home never shared an
    embedder. Where there is no such descriptor the path itself is given, and the socket
    call refuses it ("AF_UNIX path too long")."""
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH or not hasattr(os, "O_PATH"):
        yield str(path)
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


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
