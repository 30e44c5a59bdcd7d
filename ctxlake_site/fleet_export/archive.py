"""Build an export's files and manifest; write them to a directory or a tar; read them back.

The reads run in one REPEATABLE READ transaction (when the caller has none open), so every
file describes the same moment. A tar is produced member by member, for the REST stream;
reading one never extracts anything to disk: only the fixed file names are taken.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.db import connection, transaction
from django.utils import timezone

from ctxlake_site.fleet_export import layout, markdown, rows
from ctxlake_site.fleet_export.layout import Refused
from fleet.models import Fleet

#: What an export leaves out on purpose; the manifest says so.
OMITTED = ("api tokens and password hashes (secrets)", "leases (advisory, minutes long)",
           "activity, applied events, dead letters (operational logs)",
           "moderator grants (people are per server)", "screen releases (a person re-reads)")


@dataclass(frozen=True)
class Archive:
    files: dict[str, bytes]  # name → bytes, the manifest last

    @property
    def manifest(self) -> dict[str, Any]:
        return dict(json.loads(self.files[layout.MANIFEST]))


@contextmanager
def _snapshot() -> Iterator[None]:
    """One consistent view of the fleet for every file (inside a caller's transaction,
    that transaction's view)."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(layout.encode_line(r) for r in lines)


def build(fleet: Fleet, *, with_vectors: bool = False) -> Archive:
    generated_at = layout.instant(timezone.now()) or ""
    with _snapshot():
        tables = {
            layout.FLEET: [rows.fleet_row(fleet)],
            layout.AGENTS: list(rows.agent_rows(fleet)),
            layout.SESSIONS: list(rows.session_rows(fleet)),
            layout.HANDOFFS: list(rows.handoff_rows(fleet)),
            layout.CLAIMS: list(rows.claim_rows(fleet)),
            layout.EVIDENCE: list(rows.evidence_rows(fleet)),
            layout.EVENTS: list(rows.event_rows(fleet)),
        }
        if with_vectors:
            tables[layout.VECTORS] = list(rows.vector_rows(fleet))
    files = {name: _jsonl(lines) for name, lines in tables.items()}
    files[layout.MARKDOWN] = markdown.render_markdown(
        tables[layout.FLEET][0], generated_at, tables[layout.CLAIMS],
        tables[layout.EVIDENCE], tables[layout.EVENTS]).encode()
    counts = {name.removesuffix(".jsonl"): len(lines) for name, lines in tables.items()}
    files[layout.MANIFEST] = manifest_bytes(fleet.slug, generated_at, with_vectors, files,
                                            counts)
    return Archive(files)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_bytes(slug: str, generated_at: str, with_vectors: bool, files: dict[str, bytes],
                   counts: dict[str, int]) -> bytes:
    manifest = {
        "format": layout.FORMAT, "format_version": layout.FORMAT_VERSION, "fleet": slug,
        "generated_at": generated_at, "with_vectors": with_vectors, "counts": counts,
        "files": {name: {"sha256": sha256(data), "bytes": len(data)}
                  for name, data in files.items()},
        "omitted": list(OMITTED),
    }
    return json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"


def write_dir(archive: Archive, out: Path) -> None:
    """Into `out` (created; it must be new or empty), data first and the manifest last, so
    a directory with a manifest is a finished export. Owner-only: it is the fleet's memory."""
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty; export into a new directory")
    for name, data in archive.files.items():
        path = out / name
        with open(path, "xb") as f:
            path.chmod(0o600)
            f.write(data)


class _Sink(io.RawIOBase):
    """A write-only stream that hands what was written to whoever reads `take()`."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.chunks.append(bytes(b))
        return len(b)

    def take(self) -> bytes:
        out, self.chunks = b"".join(self.chunks), []
        return out


def tar_chunks(archive: Archive) -> Iterator[bytes]:
    """The archive as an uncompressed tar, one member at a time (for a streamed response)."""
    sink = _Sink()
    mtime = int(time.time())
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in archive.files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, mtime
            tar.addfile(info, io.BytesIO(data))
            yield sink.take()
    yield sink.take()


def read_dir(path: Path) -> dict[str, bytes]:
    """The archive's known files from a directory (anything else there is not read)."""
    files = {}
    for name in layout.ALL_FILES:
        member = path / name
        if member.is_file():
            if member.stat().st_size > layout.MAX_FILE_BYTES:
                raise Refused(name, 0, f"larger than {layout.MAX_FILE_BYTES} bytes")
            files[name] = member.read_bytes()
    return files


def read_tar(stream: IO[bytes]) -> dict[str, bytes]:
    """The archive's files from a tar stream; any other member, a link, a directory or a
    name given twice is refused. Nothing is written to disk."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=stream, mode="r|*") as tar:
            for info in tar:
                name = info.name.removeprefix("./")
                if name not in layout.ALL_FILES or not info.isfile() or name in files:
                    raise Refused(name or "?", 0, "not a file an export holds (or named twice)")
                if info.size > layout.MAX_FILE_BYTES:
                    raise Refused(name, 0, f"larger than {layout.MAX_FILE_BYTES} bytes")
                handle = tar.extractfile(info)
                files[name] = handle.read() if handle is not None else b""
    except tarfile.TarError as exc:
        raise Refused("archive", 0, f"not a readable tar ({exc})") from None
    return files


def read(path: str, stdin: IO[bytes]) -> dict[str, bytes]:
    """A directory, a tar file, or `-` for a tar on standard input."""
    if path == "-":
        return read_tar(stdin)
    where = Path(path)
    if where.is_dir():
        return read_dir(where)
    with where.open("rb") as f:
        return read_tar(f)
