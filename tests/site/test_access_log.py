"""A real gunicorn, started the way `./ctxlake up` starts it, serving a claim search whose
`q` carries a token: the token reaches neither the access log nor the error log; and the
settings' logging filter scrubs messages and tracebacks."""

from __future__ import annotations

import io
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

from ctxlake_site import logs
from fleet import tokens
from fleet.models import Agent, Fleet

ROOT = Path(__file__).resolve().parents[2]
GITHUB = "ghp_" + "Zq7" * 12
FREE_TEXT_PASSWORD = "hunter2-but-longer"
LOGGER_CLASS = "ctxlake_site.gunicorn_logger.ScrubbingLogger"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _database_env() -> dict[str, str]:
    """Point the server process at this test's database."""
    db = connection.settings_dict
    if os.environ.get("DATABASE_URL"):
        return {"DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:"
                                f"{db['PORT']}/{db['NAME']}"}
    return {"CTXLAKE_DB_NAME": db["NAME"]}


def test_the_ctxlake_script_starts_gunicorn_with_the_scrubbing_logger() -> None:
    script = (ROOT / "ctxlake").read_text()
    start = script.index('"-m", "gunicorn"')
    line = script[start:script.index("]", start)]  # the whole gunicorn command
    assert LOGGER_CLASS in line


def _get(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.django_db(transaction=True)
def test_a_token_in_a_search_query_never_reaches_gunicorns_logs(
    fleet_a: Fleet, ada: Agent, tmp_path: Path
) -> None:
    issued = tokens.issue_token(fleet_a, role="agent", name="log-test", agent=ada)
    port = _free_port()
    access, errors = tmp_path / "access.log", tmp_path / "error.log"
    env = {**os.environ, **_database_env(), "CTXLAKE_CACHE_DIR": str(tmp_path / "cache"),
           "CTXLAKE_SPOOL_DIR": str(tmp_path / "spool")}
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "ctxlake_site.wsgi", "--bind", f"127.0.0.1:{port}",
         "--workers", "1", "--access-logfile", str(access), "--error-logfile", str(errors),
         "--logger-class", LOGGER_CLASS],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/api/v1/fleets/{fleet_a.slug}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, errors.read_text() if errors.exists() else ""
                assert time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
        assert _get(f"{base}/claims/search?q=rotate+{GITHUB}&limit=5", issued.secret) == 200
        assert _get(f"{base}/claims/search?q={FREE_TEXT_PASSWORD}", issued.secret) == 200
        assert _get(f"{base}/claims/search?q=x&api_key={GITHUB}", "wrong-token") in (401, 403)
        # ctxlake's own token pasted into a query string (a client that puts it there)
        assert _get(f"{base}/status?access_token={issued.secret}&limit=3", issued.secret) == 200
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    logged = access.read_text() + errors.read_text()
    assert "/claims/search?q=…&limit=5" in logged  # the request is logged, its text is not
    assert "/status?access_token=…&limit=3" in logged
    for secret in (GITHUB, GITHUB[:12], FREE_TEXT_PASSWORD, issued.secret):
        assert secret not in logged


def test_the_servers_ctxlake_starts_and_the_deployment_doc_names_use_this_logger() -> None:
    root = Path(__file__).resolve().parents[2]
    assert f'"--logger-class", "{LOGGER_CLASS}"' in (root / "ctxlake").read_text()
    assert f"--logger-class {LOGGER_CLASS}" in (root / "docs" / "deployment.md").read_text()


def test_the_logging_filter_scrubs_messages_and_tracebacks() -> None:
    """Through the LOGGING settings' own console handler, not a copy of it."""
    handler = next(h for h in logging.getLogger().handlers
                   if any(isinstance(f, logs.ScrubFilter) for f in h.filters))
    log = logging.getLogger("fleet.some.module")
    stream = io.StringIO()
    previous = handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        _log_a_secret(log)
    finally:
        handler.setStream(previous)  # type: ignore[attr-defined]
    out = stream.getvalue()
    assert "RuntimeError" in out and "failed for ada" in out
    assert "Internal Server Error: /x?q=…" in out  # the django logger goes through it too
    for secret in (GITHUB, "s3cr3t-pw"):
        assert secret not in out
    assert re.search(r"\?token=…", out)


def _log_a_secret(log: logging.Logger) -> None:
    try:
        raise RuntimeError(f"upstream refused DATABASE_URL=postgres://app:s3cr3t-pw@db/app "
                           f"with {GITHUB}")
    except RuntimeError:
        log.exception("GET /api/v1/x?token=%s failed for %s", GITHUB, "ada")
    logging.getLogger("django.request").error("Internal Server Error: %s", f"/x?q={GITHUB}")


def test_elide_query_keeps_names_and_plain_values_only() -> None:
    assert logs.elide_query("q=redis+timeout&limit=10&stale=true") == "q=…&limit=10&stale=true"
    assert (logs.loggable_url(f"/reset/{GITHUB}/?next=/a")
            == "/reset/[REDACTED:github-token]/?next=…")
    assert logs.scrub_log_text(f'"GET /s?q={GITHUB} HTTP/1.1"') == '"GET /s?q=… HTTP/1.1"'


def test_the_logger_class_scrubs_error_log_tracebacks_and_header_atoms(tmp_path: Path) -> None:
    """gunicorn's own Config and Logger machinery, driven directly: an exception logged
    while handling a request, and an access format that asks for credential headers."""
    from datetime import timedelta
    from types import SimpleNamespace

    from gunicorn.config import Config

    from ctxlake_site.gunicorn_logger import ScrubbingLogger

    config = Config()
    config.set("errorlog", str(tmp_path / "error.log"))
    config.set("accesslog", str(tmp_path / "access.log"))
    config.set("access_log_format",
               '%(r)s %(q)s "%(f)s" %({authorization}i)s %({cookie}i)s %({raw_uri}e)s')
    log = ScrubbingLogger(config)
    try:
        raise ValueError(f"upstream said no to {GITHUB}")
    except ValueError:
        log.exception("Error handling request %s", f"/api/v1/x?q={GITHUB}")
    log.warning("retrying with password=%s", "Tr0ub4dor&3-long")
    environ = {"REQUEST_METHOD": "GET", "RAW_URI": f"/s?q={GITHUB}&limit=3",
               "QUERY_STRING": f"q={GITHUB}&limit=3", "PATH_INFO": "/s",
               "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_REFERER": f"https://x/?token={GITHUB}",
               "REMOTE_ADDR": "127.0.0.1"}
    request = SimpleNamespace(headers=[("AUTHORIZATION", f"Bearer {GITHUB}"),
                                       ("COOKIE", f"sessionid={GITHUB}")])
    response = SimpleNamespace(status="200 OK", sent=10, headers=[])
    log.access(response, request, environ, timedelta(milliseconds=3))
    for handler in [*log.error_log.handlers, *log.access_log.handlers]:
        handler.flush()
    errors = (tmp_path / "error.log").read_text()
    access = (tmp_path / "access.log").read_text()
    assert "ValueError: upstream said no to [REDACTED:github-token]" in errors
    assert "Error handling request /api/v1/x?q=…" in errors
    assert "Tr0ub4dor" not in errors
    assert "GET /s?q=…&limit=3 HTTP/1.1 q=…&limit=3" in access
    for text in (errors, access):
        assert GITHUB not in text and GITHUB[:10] not in text
