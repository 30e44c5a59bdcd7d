"""A private ctxlake installation for tests that start and stop servers.

The embedded Postgres under the default ~/.ctxlake is shared by every checkout on this
machine (and by the test run itself); a test that stops a database or runs `./ctxlake up`
gets its own CTXLAKE_HOME in a temp directory instead, so it starts its own embedded
server and never stops anyone else's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
# What a private installation must not inherit from the test run's environment.
INHERITED_NOT = {
    "DATABASE_URL", "CTXLAKE_DB_NAME", "CTXLAKE_CACHE_DIR", "CTXLAKE_SPOOL_DIR",
    "CTXLAKE_REDIS_URL", "CTXLAKE_PORT", "CTXLAKE_BIND_HOST", "DJANGO_SETTINGS_MODULE",
}


def private_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a process of the private installation under `home`."""
    env = {
        k: v for k, v in os.environ.items() if k not in INHERITED_NOT and not k.startswith("PYTEST")
    }
    return {**env, "CTXLAKE_HOME": str(home), **extra}


def manage(home: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=private_env(home), capture_output=True,
        text=True, timeout=timeout,
    )


def shell(home: Path, code: str) -> str:
    """Run `code` in `manage.py shell` of the private installation; its stdout."""
    run = manage(home, "shell", "--no-imports", "-c", code)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def processes_in_session(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process in session `sid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            found.append((int(entry.name), cmd))
    return found


@contextlib.contextmanager
def private_home() -> Iterator[Path]:
    """A fresh CTXLAKE_HOME outside pytest's temp root, its embedded server stopped after.

    Not under tmp_path: pytest resets its temp root to mode 0700 at every session start
    (other checkouts run pytest too), and when running as root the embedded Postgres runs
    as the `pgserver` user, which must be able to reach the data directory.
    """
    root = Path(tempfile.mkdtemp(prefix="ctxlake-test-", dir="/tmp"))
    root.chmod(0o755)
    try:
        yield root / "home"
    finally:
        from ctxlake_site import embedded_db

        with contextlib.suppress(Exception):
            embedded_db.stop(root / "home" / "pg")
        shutil.rmtree(root, ignore_errors=True)


def borrowed_venv(where: Path) -> Path:
    """A venv for `./ctxlake` that is this test run's venv, already "installed".

    `./ctxlake up` installs requirements.txt into $CTXLAKE_VENV unless its stamp matches;
    the tests must neither reach PyPI nor write into the shared venv, so they point it at
    a directory whose python and site-packages are this venv's, with a matching stamp.
    """
    real = Path(sys.prefix)
    venv = where / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / "lib").symlink_to(real / "lib")
    shutil.copy(real / "pyvenv.cfg", venv / "pyvenv.cfg")
    digest = hashlib.sha256()
    for name in ("requirements.txt", "requirements.txt"):
        digest.update((ROOT / name).read_bytes())
    (venv / ".installed-requirements").write_text(digest.hexdigest())
    return venv
