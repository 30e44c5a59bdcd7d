"""DATABASE_URL: any Postgres with pgvector works; one without pgvector is refused clearly.

Both servers here are real and separate from the embedded default: Debian's PostgreSQL
(which has no pgvector package in this distribution) and a second pgvector-enabled server
started just for this module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from ctxlake_site import embedded_db
from tests.helpers import HANG_GUARD_SECS, ctxlake_script
from tests.site.homes import private_home

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None)

pytestmark = pytest.mark.slow


def _url(socket_dir: Path, db: str) -> str:
    return f"postgres://postgres@{quote(str(socket_dir), safe='')}/{db}"


def _run(
    args: list[str], url: str, home: Path, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """`args` run by this interpreter against `url`, with none of this pytest's own
    variables (an xdist worker's PYTEST_XDIST_WORKER is not the sub-run's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env |= {"DATABASE_URL": url, "CTXLAKE_HOME": str(home)}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def postgres_without_pgvector() -> Iterator[Path]:
    if DEBIAN_BIN is None or not (DEBIAN_BIN / "initdb").exists() or not shutil.which("runuser"):
        pytest.skip("Debian's PostgreSQL server is not installed on this machine")
    # Directly under /tmp: pytest's own temp root is private to root, and this server runs
    # as the 'postgres' user.
    base = Path(tempfile.mkdtemp(prefix="ctxlake-debian-pg-"))
    base.chmod(0o777)
    data, sock = base / "data", base / "sock"
    sock.mkdir(mode=0o777)
    sock.chmod(0o777)
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run(
        [*as_pg, str(DEBIAN_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *as_pg,
            str(DEBIAN_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-l",
            str(base / "log"),
            "-o",
            f"-h '' -k {sock}",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    yield sock
    subprocess.run(
        [*as_pg, str(DEBIAN_BIN / "pg_ctl"), "-D", str(data), "-w", "stop"], capture_output=True
    )
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def separate_pgvector_server() -> Iterator[Path]:
    """A second embedded server, outside pytest's temp root (homes.private_home): the
    sub-run's own pytest resets that root to 0700, and the server (user pgserver) lost its
    data directory mid-run ("could not open file .../global/pg_control: Permission
    denied")."""
    with private_home() as home:
        server = embedded_db.attach(home / "pg")
        embedded_db.ensure_database(server, "ctxlake_ext")
        yield server.socket_dir


def test_migrate_names_the_missing_extension_and_how_to_get_it(
    postgres_without_pgvector: Path, tmp_path: Path
) -> None:
    result = _run(["manage.py", "migrate"], _url(postgres_without_pgvector, "postgres"), tmp_path)
    assert result.returncode != 0
    assert "PostgreSQL extension 'vector'" in result.stderr
    assert "postgresql-<major>-pgvector" in result.stderr


def test_doctor_reports_pgvector_missing(postgres_without_pgvector: Path, tmp_path: Path) -> None:
    result = _run(["manage.py", "doctor"], _url(postgres_without_pgvector, "postgres"), tmp_path)
    assert result.returncode == 1
    assert "extension 'vector' not available" in result.stdout


def test_the_model_suite_passes_against_a_database_url(
    separate_pgvector_server: Path, tmp_path: Path
) -> None:
    """Run as `./ctxlake test` runs pytest (its workers too: this one test is often the
    last file handed out, and on one worker the other would idle for minutes)."""
    url = _url(separate_pgvector_server, "ctxlake_ext")
    suite = ["tests/fleet", "tests/claims/test_models.py", "tests/claims/test_moderation.py",
             "tests/site/test_drain.py"]
    result = _run(
        ["-m", "pytest", *ctxlake_script().pytest_args(["-q", "-p", "no:cacheprovider", *suite])],
        url,
        tmp_path,
        timeout=HANG_GUARD_SECS,  # this sub-suite ran past 300 s on a slow 2-core VM
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
