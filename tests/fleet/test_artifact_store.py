"""Rendered cache files in an S3-compatible object store (CTXLAKE_S3_*), against a real one.

The store is moto's S3 server on 127.0.0.1, started here; every upload, read and delete is
real HTTP through django-storages and boto3. Nothing of either is mocked.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from django.views.debug import SafeExceptionReporterFilter

from ctxlake_site import object_store, workers
from ctxlake_site.env import BadSetting
from fleet import artifact_store, artifacts, body_memo, leases, tokens
from fleet.models import Agent, CacheArtifact, CacheHead, Fleet
from mcp_bridge import contract
from tests.fleet.conftest import ApiAs
from tests.fleet.s3_store import ACCESS_KEY, PREFIX, S3, SECRET_KEY
from tests.fleet.s3_store import configure as _configure
from tests.fleet.s3_store import object_key as _key
from tests.fleet.s3_store import start as _start
from tests.helpers import database_url_for_test_database, env_for_test_database

ROOT = Path(__file__).resolve().parents[2]

def _get(api_as: ApiAs, agent: Agent, name: str) -> Any:
    return api_as(agent).get(f"/api/v1/fleets/{agent.fleet.slug}/cache/{name}")


def _heads(fleet: Fleet) -> dict[str, int]:
    return dict(CacheHead.objects.filter(fleet=fleet).values_list("name", "artifact_id"))


def test_it_renders_into_the_bucket_and_serves_the_same_bytes_and_etag(
    s3: S3, fleet_a: Fleet, ada: Agent, api_as: ApiAs, settings: Any
) -> None:
    settings.CTXLAKE_LOCAL_CACHE = False  # only the store holds the bytes
    workers.render_fleet(fleet_a)
    rows = list(CacheArtifact.objects.filter(fleet=fleet_a))
    assert {r.name for r in rows} >= {contract.MANIFEST, contract.ROSTER, contract.SNAPSHOT}
    assert s3.objects() == {f"{PREFIX}{fleet_a.pk}/{r.name}/{r.sha256}" for r in rows}
    for row in rows:
        assert row.place == CacheArtifact.Place.OBJECT_STORE and bytes(row.body) == b""
        stored = s3.body(f"{PREFIX}{fleet_a.pk}/{row.name}/{row.sha256}")
        assert hashlib.sha256(stored).hexdigest() == row.sha256 and len(stored) == row.size
        got = _get(api_as, ada, row.name)
        assert got.status_code == 200, got.content
        assert got.content == stored and got.headers["ETag"] == contract.etag_of(row.sha256)


def test_the_change_feed_inlines_files_from_the_store_and_leaves_out_what_it_cannot_read(
    s3: S3, fleet_a: Fleet, ada: Agent, api_as: ApiAs, settings: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bodies a long-poll answer carries are read from where they were written; one
    the store cannot give is left for the host to GET (it gets the store's 503 there),
    unless this process has read it before (fleet.body_memo): then it is served as kept."""
    settings.CTXLAKE_LOCAL_CACHE = False
    workers.render_fleet(fleet_a)
    url = f"/api/v1/fleets/{fleet_a.slug}/changes"
    answer = api_as(ada).get(url, {"have": ""}).json()
    listed = {f["name"]: f["etag"] for f in answer["listing"]["files"]}
    assert contract.ROSTER in answer["files"]
    for name, text in answer["files"].items():
        assert contract.etag_of(hashlib.sha256(text.encode()).hexdigest()) == listed[name]
    roster = CacheArtifact.objects.get(fleet=fleet_a, name=contract.ROSTER)
    s3.client().delete_object(Bucket=s3.bucket, Key=f"{PREFIX}{fleet_a.pk}/{roster.name}/"
                                                    f"{roster.sha256}")
    kept = api_as(ada).get(url, {"have": ""}).json()
    assert kept["files"] == answer["files"]  # read before: the store is not asked again
    assert _get(api_as, ada, contract.ROSTER).content == answer["files"][contract.ROSTER].encode()
    body_memo.clear()  # a web process that has not read it
    with caplog.at_level(logging.WARNING, logger="fleet.api_changes"):
        fewer = api_as(ada).get(url, {"have": ""})
    assert fewer.status_code == 200
    assert set(fewer.json()["files"]) == set(answer["files"]) - {contract.ROSTER}
    assert any("roster.json" in r.getMessage() and "not inlined" in r.getMessage()
               for r in caplog.records)
    assert _get(api_as, ada, contract.ROSTER).status_code == 503


def test_the_same_bytes_are_uploaded_once(s3: S3, fleet_a: Fleet) -> None:
    now = timezone.now()
    artifacts.publish(fleet_a, {"roster.json": b"same"}, at=now)
    key = _key(fleet_a, "roster.json", b"same")
    s3.client().delete_object(Bucket=s3.bucket, Key=key)  # a second upload would restore it
    artifacts.publish(fleet_a, {"roster.json": b"same"}, at=now + timedelta(seconds=1))
    assert key not in s3.objects()
    assert CacheArtifact.objects.filter(fleet=fleet_a).count() == 1


def test_pruned_bodies_are_deleted_only_after_commit(
    s3: S3, fleet_a: Fleet, django_capture_on_commit_callbacks: Any
) -> None:
    now = timezone.now()
    bodies = [b"r%d" % i for i in range(artifacts.RENDERS_KEPT + 2)]
    with django_capture_on_commit_callbacks(execute=False) as deletes:
        for i, body in enumerate(bodies):
            artifacts.publish(fleet_a, {"roster.json": body},
                              at=now + timedelta(seconds=i))
        assert s3.objects() == {_key(fleet_a, "roster.json", b) for b in bodies}  # not yet
    for delete in deletes:
        delete()
    kept = bodies[-artifacts.RENDERS_KEPT:]
    assert s3.objects() == {_key(fleet_a, "roster.json", b) for b in kept}
    assert CacheArtifact.objects.filter(fleet=fleet_a).count() == artifacts.RENDERS_KEPT


def test_a_delete_that_fails_is_logged_and_the_object_left(
    s3: S3, fleet_a: Fleet, django_capture_on_commit_callbacks: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=False) as deletes:
        for i in range(artifacts.RENDERS_KEPT + 1):
            artifacts.publish(fleet_a, {"roster.json": b"r%d" % i}, at=now + timedelta(seconds=i))
    s3.server.stop()
    with caplog.at_level(logging.WARNING, logger="fleet.artifact_store"):
        for delete in deletes:
            delete()  # no exception: the render has committed, the orphan costs storage
    assert f"{PREFIX}{fleet_a.pk}/roster.json/" in caplog.text and "left behind" in caplog.text


def test_a_render_that_rolls_back_moves_no_head_and_its_upload_is_never_served(
    s3: S3, fleet_a: Fleet, ada: Agent, api_as: ApiAs
) -> None:
    artifacts.publish(fleet_a, {"roster.json": b"committed"}, at=timezone.now())
    before = _heads(fleet_a)
    with pytest.raises(RuntimeError), transaction.atomic():
        artifacts.publish(fleet_a, {"roster.json": b"rolled back"}, at=timezone.now())
        raise RuntimeError("the render failed after publishing")
    assert _heads(fleet_a) == before
    assert _key(fleet_a, "roster.json", b"rolled back") in s3.objects()  # an orphan, at most
    assert _get(api_as, ada, "roster.json").content == b"committed"


def test_switching_the_store_on_and_off_serves_every_head_from_where_it_is(
    s3: S3, fleet_a: Fleet, ada: Agent, api_as: ApiAs, monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    now = timezone.now()
    _configure(monkeypatch, settings, None)
    artifacts.publish(fleet_a, {"roster.json": b"in postgres"}, at=now)
    _configure(monkeypatch, settings, s3)  # on: rows written before stay in Postgres
    assert _get(api_as, ada, "roster.json").content == b"in postgres"
    artifacts.publish(fleet_a, {"roster.json": b"in postgres", "briefing.md": b"in the store"},
                      at=now)
    assert s3.objects() == {_key(fleet_a, "briefing.md", b"in the store")}
    assert _get(api_as, ada, "briefing.md").content == b"in the store"
    _configure(monkeypatch, settings, None)  # off: a head in the store answers 503 …
    assert _get(api_as, ada, "briefing.md").content == b"in the store"  # (read before: kept)
    body_memo.clear()  # … in a web process that has not read it
    refused = _get(api_as, ada, "briefing.md")
    assert refused.status_code == 503 and "object store" in refused.json()["detail"]
    assert artifacts.stranded(fleet_a) == ["briefing.md"]
    with pytest.raises(artifact_store.StoreError, match="not configured"):
        artifacts.latest(fleet_a, "briefing.md")
    # … until a render writes it again: the same bytes move into Postgres
    artifacts.publish(fleet_a, {"roster.json": b"in postgres", "briefing.md": b"in the store"},
                      at=now + timedelta(seconds=1))
    assert artifacts.stranded(fleet_a) == []
    row = CacheArtifact.objects.get(fleet=fleet_a, name="briefing.md")
    assert row.place == CacheArtifact.Place.DATABASE and bytes(row.body) == b"in the store"
    assert _get(api_as, ada, "briefing.md").content == b"in the store"


def test_a_render_after_switching_off_moves_the_whole_cache_into_postgres(
    s3: S3, fleet_a: Fleet, ada: Agent, api_as: ApiAs, monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    """The snapshot is kept as it is when no claim changed; one left in the store is
    rebuilt instead, so one render makes every file servable again."""
    settings.CTXLAKE_LOCAL_CACHE = False
    workers.render_fleet(fleet_a)
    snapshot = _get(api_as, ada, contract.SNAPSHOT)
    assert snapshot.status_code == 200
    _configure(monkeypatch, settings, None)
    assert contract.SNAPSHOT in artifacts.stranded(fleet_a)
    workers.render_fleet(fleet_a)
    assert artifacts.stranded(fleet_a) == []
    assert not CacheHead.objects.filter(
        fleet=fleet_a, artifact__place=CacheArtifact.Place.OBJECT_STORE).exists()
    for name in (contract.SNAPSHOT, contract.ROSTER, contract.MANIFEST):
        assert _get(api_as, ada, name).status_code == 200, name


def test_a_store_that_does_not_answer_fails_the_render_and_moves_no_head(
    s3: S3, fleet_a: Fleet, ada: Agent, api_as: ApiAs, monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    settings.CTXLAKE_LOCAL_CACHE = False
    _configure(monkeypatch, settings, None)
    workers.render_fleet(fleet_a)  # every file in Postgres
    in_postgres = _get(api_as, ada, contract.HANDOFFS).content
    _configure(monkeypatch, settings, s3)
    others = [n for n in _heads(fleet_a) if n != contract.ROSTER]
    artifacts.publish(fleet_a, {contract.ROSTER: b'{"agents":[]}'}, at=timezone.now(),
                      keep=others)  # the roster in the store
    before = _heads(fleet_a)
    served = _get(api_as, ada, contract.ROSTER).content
    assert served == b'{"agents":[]}'
    leases.claim_paths(ada, ["src/**"], ttl=timedelta(hours=1))  # a render with new bytes
    port = s3.server.get_host_and_port()[1]
    s3.server.stop()
    with pytest.raises(artifact_store.StoreError, match=rf"127\.0\.0\.1:{port}.*upload"):
        workers.render_fleet(fleet_a)
    assert _heads(fleet_a) == before
    assert _get(api_as, ada, contract.HANDOFFS).content == in_postgres  # still served
    assert _get(api_as, ada, contract.ROSTER).content == served  # read before: kept
    body_memo.clear()  # a web process that has not read it:
    down = _get(api_as, ada, contract.ROSTER)  # the store's: a clear 503, not a 500
    assert down.status_code == 503 and down.headers.get("ETag") is None
    # the task fails the same way each time it runs (django-q's worker records a task's
    # Exception as a failure and takes the next task; Q_CLUSTER bounds its retries)
    for _ in range(2):
        with pytest.raises(artifact_store.StoreError, match="upload"):
            workers.render_fleet_cache(fleet_a.pk)
        assert _heads(fleet_a) == before
    assert settings.Q_CLUSTER["max_attempts"] == 3
    s3.server = _start(port)  # the store is back: the same render is served again
    assert _get(api_as, ada, contract.ROSTER).content == served
    workers.render_fleet(fleet_a)
    assert _heads(fleet_a) != before


def test_the_access_keys_are_never_logged_or_served(
    s3: S3, fleet_a: Fleet, ada: Agent, api_as: ApiAs, caplog: pytest.LogCaptureFixture,
    settings: Any,
) -> None:
    settings.CTXLAKE_LOCAL_CACHE = False
    shown: list[str] = []
    with caplog.at_level(logging.DEBUG):
        workers.render_fleet(fleet_a)
        shown += [_get(api_as, ada, n).content.decode(errors="replace")
                  for n in (contract.MANIFEST, contract.ROSTER, contract.BRIEFING)]
        # new bytes for the next render: within the same second (the files' stamps) it
        # would render the same bodies and upload nothing, so nothing could fail
        leases.claim_paths(ada, ["src/**"], ttl=timedelta(hours=1))
        s3.server.stop()
        shown.append(_get(api_as, ada, contract.ROSTER).content.decode())
        with pytest.raises(artifact_store.StoreError) as failed:
            workers.render_fleet(fleet_a)
        shown.append(str(failed.value))
    shown.append(repr(SafeExceptionReporterFilter().get_safe_settings()))  # the 500 page
    assert caplog.records  # something was logged: requests, the failure
    for text in [caplog.text, *shown]:
        assert ACCESS_KEY not in text and SECRET_KEY not in text


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_web_hosts_serve_the_same_render_from_the_store(
    s3: S3, fleet_a: Fleet, ada: Agent, settings: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two gunicorn web hosts, each with its own CTXLAKE_HOME and the store's variables,
    on this test's database: each serves what this process (the worker) rendered."""
    settings.CTXLAKE_LOCAL_CACHE = False
    workers.render_fleet(fleet_a)  # committed: transaction=True
    token = tokens.issue_token(fleet_a, role="agent", name="web-hosts", agent=ada).secret
    env = {**env_for_test_database(SECRET_KEY="objstore-" + "x" * 40,
                                   CTXLAKE_LOG_LEVEL="DEBUG"),
           **{n: v for n, v in os.environ.items() if n.startswith("CTXLAKE_S3_")}}
    env["DATABASE_URL"] = database_url_for_test_database()
    for name in ("CTXLAKE_CACHE_DIR", "CTXLAKE_SPOOL_DIR", "CTXLAKE_DB_NAME"):
        env.pop(name, None)
    hosts = [_web_host(tmp_path / f"web{n}", env) for n in (1, 2)]
    try:
        for name in (contract.MANIFEST, contract.ROSTER, contract.SNAPSHOT):
            row = CacheHead.objects.get(fleet=fleet_a, name=name).artifact
            assert row.place == CacheArtifact.Place.OBJECT_STORE
            for _, url in hosts:
                served = _http_get(f"{url}/api/v1/fleets/{fleet_a.slug}/cache/{name}", token)
                assert served[0] == 200, served
                assert served[1] == contract.etag_of(row.sha256)
                assert hashlib.sha256(served[2]).hexdigest() == row.sha256
    finally:
        for proc, _ in hosts:
            proc.terminate()
            proc.wait(timeout=20)
    for n in (1, 2):  # the hosts logged at DEBUG: never the keys
        log = (tmp_path / f"web{n}" / "process.log").read_text(errors="replace")
        assert ACCESS_KEY not in log and SECRET_KEY not in log


def _web_host(home: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    home.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(home / "process.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "ctxlake_site.wsgi", "--bind",
             f"127.0.0.1:{port}", "--workers", "1", "--threads", "2"],
            cwd=ROOT, env={**env, "CTXLAKE_HOME": str(home)}, stdout=log,
            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while not _answers(url):
        assert proc.poll() is None and time.monotonic() < deadline, (
            (home / "process.log").read_text(errors="replace")[-3000:])
        time.sleep(0.05)
    return proc, url


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/api/v1/health", timeout=2).close()
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def _http_get(url: str, token: str) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers["ETag"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, "", e.read()


BAD = [
    ({"CTXLAKE_S3_BUCKET": ""}, "CTXLAKE_S3_BUCKET='' is not allowed: an S3 bucket name"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_ENDPOINT_URL": "minio:9000"},
     "CTXLAKE_S3_ENDPOINT_URL='minio:9000' is not allowed: an http:// or https:// URL"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_ENDPOINT_URL": "http://u:hunter2@minio/"},
     "CTXLAKE_S3_ENDPOINT_URL='http://u:***@minio/' is not allowed"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_ENDPOINT_URL": "http://minio:9000/path"},
     "is not allowed: an http:// or https:// URL"),
    ({"CTXLAKE_S3_BUCKET": "Not_A_Bucket"}, "CTXLAKE_S3_BUCKET='Not_A_Bucket' is not allowed"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_PREFIX": "../up/"},
     "CTXLAKE_S3_PREFIX='../up/' is not allowed"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_PREFIX": "no-slash"},
     "CTXLAKE_S3_PREFIX='no-slash' is not allowed"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_SECRET_ACCESS_KEY": "hunter2"},
     "CTXLAKE_S3_SECRET_ACCESS_KEY='(hidden)' is not allowed: set with the other access key"),
    ({"CTXLAKE_S3_BUCKET": "bkt", "CTXLAKE_S3_ACCESS_KEY_ID": "AKIA1",
      "CTXLAKE_S3_SECRET_ACCESS_KEY": "hunter 2"},
     "CTXLAKE_S3_SECRET_ACCESS_KEY='(hidden)' is not allowed: printable"),
    ({"CTXLAKE_S3_ENDPOINT_URL": "http://minio:9000"},
     "CTXLAKE_S3_ENDPOINT_URL='http://minio:9000' is not allowed: only with CTXLAKE_S3_BUCKET"),
]


@pytest.mark.parametrize(("env", "message"), BAD, ids=lambda v: str(v)[:50])
def test_a_bad_store_setting_is_refused_clearly(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name in object_store._VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(BadSetting) as refused:
        object_store.from_env()
    assert message in str(refused.value)
    assert "hunter2" not in str(refused.value) and "hunter 2" not in str(refused.value)


def test_no_store_variable_means_renders_stay_in_postgres(
    monkeypatch: pytest.MonkeyPatch, fleet_a: Fleet, settings: Any
) -> None:
    _configure(monkeypatch, settings, None)
    assert object_store.from_env() is None and not artifact_store.configured()
    artifacts.publish(fleet_a, {"roster.json": b"r"}, at=timezone.now())
    row = CacheArtifact.objects.get(fleet=fleet_a)
    assert row.place == CacheArtifact.Place.DATABASE and bytes(row.body) == b"r"




def test_without_a_store_no_process_imports_botocore() -> None:
    """The web and the workers without CTXLAKE_S3_* never pay for boto: artifact_store
    imports botocore only in the `except` clause of a store that failed."""
    env = {k: v for k, v in env_for_test_database().items() if not k.startswith("CTXLAKE_S3_")}
    code = ("import sys, django; django.setup(); "
            "import fleet.artifacts, fleet.api_sync, ctxlake_site.workers; "
            "sys.exit(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('botocore', 'boto3', 'storages')) or 0)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
