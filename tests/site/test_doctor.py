from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_doctor_is_green_on_a_working_installation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(tmp_path / "spool"))
    out = StringIO()
    call_command("doctor", "--json", stdout=out)
    checks = {c["name"]: c for c in json.loads(out.getvalue())}
    assert set(checks) == {
        "database", "pgvector", "migrations", "cache dir", "spool dir", "worker", "index bloat"
    }
    assert all(c["status"] == "ok" for n, c in checks.items() if n != "worker"), checks
    assert "PostgreSQL" in checks["database"]["detail"]


@pytest.mark.django_db
def test_doctor_fails_when_a_directory_is_not_writable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(blocker / "cache"))
    out = StringIO()
    with pytest.raises(Exception, match="cache dir"):
        call_command("doctor", stdout=out)
    assert "cache dir" in out.getvalue() and "FAIL" in out.getvalue()


def test_doctor_fails_clearly_when_the_database_is_down(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": "postgres://nobody@127.0.0.1:9/nowhere",
        "CTXLAKE_HOME": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "doctor"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "database" in result.stdout and "FAIL" in result.stdout
    assert "skipped: database unreachable" in result.stdout
    assert "1 check(s) failed" not in result.stderr  # every database check is reported failed
