"""Settings come from the environment; bad values fail loudly, production values pass --deploy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from ctxlake_site.env import env_bool, env_int, env_list

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "SECRET_KEY": "k" * 20 + "-production-secret-with-enough-entropy-9f8e7d6c5b4a",
    "DEBUG": "false",
    "ALLOWED_HOSTS": "ctxlake.example.com",
    "CTXLAKE_HTTPS": "true",
    "DATABASE_URL": "postgres://ctxlake@db.internal:5432/ctxlake",
}


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in PRODUCTION}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("raw", ["maybe", "2", "truthy"])
def test_env_bool_refuses_what_is_not_a_boolean(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("X_FLAG", raw)
    with pytest.raises(ImproperlyConfigured, match="X_FLAG"):
        env_bool("X_FLAG")


def test_env_helpers_read_good_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_FLAG", " Yes ")
    monkeypatch.setenv("X_NUM", "12")
    monkeypatch.setenv("X_LIST", "a, b")
    assert env_bool("X_FLAG") is True
    assert env_int("X_NUM", 0) == 12
    assert env_list("X_LIST", []) == ["a", "b"]
    assert env_int("X_MISSING", 7) == 7


def test_env_int_refuses_junk_and_values_below_the_minimum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_NUM", "ten")
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        env_int("X_NUM", 0)
    monkeypatch.setenv("X_NUM", "-1")
    with pytest.raises(ImproperlyConfigured, match="minimum"):
        env_int("X_NUM", 0, minimum=0)


def test_env_list_refuses_empty_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_LIST", "a,,b")
    with pytest.raises(ImproperlyConfigured, match="empty item"):
        env_list("X_LIST", [])


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "perhaps"}, "DEBUG='perhaps' is not a boolean"),
        ({"ALLOWED_HOSTS": "a,,b"}, "ALLOWED_HOSTS"),
        ({"DATABASE_URL": "mysql://u@h/db"}, "must point at PostgreSQL"),
        ({"DATABASE_URL": "nonsense://"}, "DATABASE_URL"),
        ({"CTXLAKE_Q_WORKERS": "0"}, "CTXLAKE_Q_WORKERS=0 is below the minimum"),
    ],
)
def test_manage_py_fails_clearly_on_bad_settings(env: dict[str, str], message: str) -> None:
    result = _manage("check", **env)
    assert result.returncode != 0
    assert message in result.stderr


def test_production_settings_pass_check_deploy() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout
