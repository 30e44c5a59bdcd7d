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
    with pytest.raises(ImproperlyConfigured, match="X_NUM='ten' is not allowed: an integer"):
        env_int("X_NUM", 0)
    monkeypatch.setenv("X_NUM", "-1")
    with pytest.raises(ImproperlyConfigured, match="an integer of at least 0"):
        env_int("X_NUM", 0, minimum=0)


def test_env_list_refuses_empty_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_LIST", "a,,b")
    with pytest.raises(ImproperlyConfigured, match="without empty items"):
        env_list("X_LIST", [])


# Every variable the settings read, each with a bad value and what its one line must say.
BAD_SETTINGS = [
    ({"DEBUG": "perhaps"}, "DEBUG='perhaps' is not allowed: a boolean"),
    ({"DEBUG": ""}, "DEBUG='' is not allowed: a boolean"),  # docs/configuration.md: "" ≠ false
    ({"CTXLAKE_HTTPS": "sometimes"}, "CTXLAKE_HTTPS='sometimes' is not allowed: a boolean"),
    ({"CTXLAKE_BEHIND_PROXY": "2"}, "CTXLAKE_BEHIND_PROXY='2' is not allowed: a boolean"),
    ({"CTXLAKE_STATIC_FINDERS": "y"}, "CTXLAKE_STATIC_FINDERS='y' is not allowed: a boolean"),
    ({"CTXLAKE_Q_SYNC": "maybe"}, "CTXLAKE_Q_SYNC='maybe' is not allowed: a boolean"),
    ({"ALLOWED_HOSTS": "a,,b"}, "ALLOWED_HOSTS='a,,b' is not allowed: a comma-separated"),
    ({"CSRF_TRUSTED_ORIGINS": "ctxlake.example.com"},
     "CSRF_TRUSTED_ORIGINS='ctxlake.example.com' is not allowed: comma-separated origins"),
    ({"CTXLAKE_HSTS_SECONDS": "-5"}, "CTXLAKE_HSTS_SECONDS='-5' is not allowed: an integer"),
    ({"DB_CONN_MAX_AGE": "forever"}, "DB_CONN_MAX_AGE='forever' is not allowed: an integer"),
    ({"CTXLAKE_DB_POOL": "-1"}, "CTXLAKE_DB_POOL='-1' is not allowed: an integer of at least 0"),
    ({"CTXLAKE_DB_POOL": "1e400"}, "CTXLAKE_DB_POOL='1e400' is not allowed: an integer"),
    ({"CTXLAKE_DB_POOL": "16\udcff"}, "CTXLAKE_DB_POOL="),
    ({"CTXLAKE_DB_PREPARE": "-1"},
     "CTXLAKE_DB_PREPARE='-1' is not allowed: an integer of at least 0"),
    ({"CTXLAKE_DB_PREPARE": "1e400"}, "CTXLAKE_DB_PREPARE='1e400' is not allowed: an integer"),
    ({"CTXLAKE_DB_NAME": "my db"}, "CTXLAKE_DB_NAME='my db' is not allowed: a database name"),
    ({"CTXLAKE_MAX_BODY_BYTES": "10"}, "CTXLAKE_MAX_BODY_BYTES='10' is not allowed: an integer "
     "of at least 1024"),
    ({"CTXLAKE_API_RATE_PER_MINUTE": "0"}, "CTXLAKE_API_RATE_PER_MINUTE='0' is not allowed"),
    ({"CTXLAKE_Q_WORKERS": "0"}, "CTXLAKE_Q_WORKERS='0' is not allowed: an integer of at least 1"),
    ({"CTXLAKE_REDIS_URL": "http://redis"}, "CTXLAKE_REDIS_URL='http://redis' is not allowed"),
    ({"CTXLAKE_LOG_LEVEL": "LOUD"}, "CTXLAKE_LOG_LEVEL='LOUD' is not allowed: one of DEBUG"),
    ({"CTXLAKE_EMBEDDER": "no.such.module"}, "CTXLAKE_EMBEDDER='no.such.module' is not allowed"),
    ({"DATABASE_URL": "mysql://u:hunter2@h/db"},
     "DATABASE_URL='mysql://u:***@h/db' is not allowed: a postgres:// URL"),
    ({"DATABASE_URL": "nonsense://"}, "DATABASE_URL='nonsense://' is not allowed"),
    ({"CTXLAKE_S3_BUCKET": ""}, "CTXLAKE_S3_BUCKET='' is not allowed: an S3 bucket name"),
    ({"CTXLAKE_S3_BUCKET": "b1", "CTXLAKE_S3_ENDPOINT_URL": "http://k:hunter2@minio:9000"},
     "CTXLAKE_S3_BUCKET='b1' is not allowed"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_ENDPOINT_URL": "http://k:hunter2@minio:9000"},
     "CTXLAKE_S3_ENDPOINT_URL='http://k:***@minio:9000' is not allowed: an http:// or https://"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_ACCESS_KEY_ID": "k",
      "CTXLAKE_S3_SECRET_ACCESS_KEY": "hunter2 x"},
     "CTXLAKE_S3_SECRET_ACCESS_KEY='(hidden)' is not allowed: printable characters"),
]


@pytest.mark.parametrize(("env", "message"), BAD_SETTINGS, ids=lambda v: str(v)[:40])
def test_manage_py_refuses_a_bad_setting_in_one_line(env: dict[str, str], message: str) -> None:
    result = _manage("check", **env)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()  # one line, nothing else
    assert line.startswith(f"ctxlake: bad setting: {message}"), line
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr
    assert result.stdout == ""


def test_the_web_entry_point_refuses_a_bad_setting_in_one_line() -> None:
    """gunicorn imports ctxlake_site.wsgi: the same one line and status 2, no traceback."""
    env = {k: v for k, v in os.environ.items() if k not in PRODUCTION}
    result = subprocess.run(
        [sys.executable, "-c", "import ctxlake_site.wsgi"],
        cwd=ROOT, env={**env, "DEBUG": "maybe"}, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "ctxlake: bad setting: DEBUG='maybe' is not allowed: a boolean (true/false, 1/0, "
        "yes/no, on/off); unset it for the default"
    ]


def test_production_settings_pass_check_deploy() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout
