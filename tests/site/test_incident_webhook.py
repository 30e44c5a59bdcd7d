"""The fleet's incident webhook against a real loopback HTTP server (http.server in a
thread on 127.0.0.1): delivered once and signed; a failing receiver is retried with
backoff and given up on after MAX_ATTEMPTS, while the drain goes on applying events; only
http(s) URLs, with a secret, are ever stored."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from ctxlake_site import workers
from fleet import webhooks
from fleet.models import Agent, AppliedEvent, DeadLetter, Fleet, Incident
from mcp_bridge.contract import events
from mcp_bridge.contract.spool import Spool

SECRET = "whsec-test-1234"


class Receiver:
    """A loopback HTTP server that records every POST and answers with `status`."""

    def __init__(self, status: int = 204, location: str = "") -> None:
        self.status, self.location = status, location
        self.got: list[tuple[dict[str, str], bytes]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.got.append((dict(self.headers), body))
                self.send_response(owner.status)
                if owner.location:
                    self.send_header("Location", owner.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/ctxlake"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def hooked(fleet: Fleet, url: str) -> Fleet:
    fleet.incident_webhook_url, fleet.incident_webhook_secret = url, SECRET
    fleet.full_clean()
    fleet.save()
    return fleet


def intrusion(spool_dir: Path, path: str = "src/payments/api.py") -> None:
    Spool(spool_dir, fleet="fleet-a", agent="ada", session="ada-s1").append(
        events.KIND_LEASE_INTRUSION, {"paths": [path], "holder": "bo", "tool": "edit"})


def claim(spool_dir: Path, path: str) -> None:
    Spool(spool_dir, fleet="fleet-a", agent="bo", session="bo-s1").append(
        events.KIND_LEASE_CLAIM, {"paths": [path], "reason": "work"})


def test_an_incident_reaches_the_webhook_once_signed_after_the_drain_commits(
    fleet_a: Fleet, ada: Agent, bo: Agent, spool_dir: Path, receiver: Receiver,
    django_capture_on_commit_callbacks: Any,
) -> None:
    hooked(fleet_a, receiver.url)
    intrusion(spool_dir)
    with django_capture_on_commit_callbacks() as queued:
        workers.drain_spool()
    [incident] = Incident.objects.all()
    # the drain only queued it: nothing was sent while its transaction was open
    assert receiver.got == [] and incident.webhook_next_at is not None
    assert f"incident-webhook:{incident.pk}" in [getattr(c, "ctxlake_key", "") for c in queued]

    assert webhooks.deliver(incident.pk) == f"incident {incident.pk}: delivered"  # the task
    assert webhooks.deliver_due() == [] and webhooks.deliver(incident.pk).endswith("nothing due")

    [(headers, body)] = receiver.got
    expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(headers["X-Ctxlake-Signature"], expected)
    assert headers["Content-Type"] == "application/json"
    sent = json.loads(body)
    assert (sent["id"], sent["kind"], sent["actor"]["agent_id"], sent["holder"]["agent_id"],
            sent["paths"]) == (f"i-{incident.pk}", "edit_in_lease", "ada", "bo",
                               ["src/payments/api.py"])
    incident.refresh_from_db()
    assert incident.webhook_delivered_at is not None and incident.webhook_attempts == 1


def test_a_failing_webhook_is_retried_with_backoff_then_given_up_and_the_drain_goes_on(
    fleet_a: Fleet, ada: Agent, bo: Agent, spool_dir: Path, receiver: Receiver,
) -> None:
    receiver.status = 500
    hooked(fleet_a, receiver.url)
    intrusion(spool_dir)
    claim(spool_dir, "docs/a.md")
    assert workers.drain_spool().applied == 2
    [incident] = Incident.objects.all()

    start = timezone.now()
    assert "attempt 1 failed (HTTP 500); retry at" in webhooks.deliver(incident.pk)
    assert webhooks.deliver_due() == []  # the backoff holds it
    for n, wait in enumerate(webhooks.BACKOFF, start=2):
        claim(spool_dir, f"docs/{n}.md")  # meanwhile the drain applies what comes in
        assert workers.drain_spool().applied == 1
        start += wait + timedelta(seconds=5)
        with time_machine.travel(start, tick=False):
            [outcome] = webhooks.deliver_due()
        assert f"attempt {n} failed (HTTP 500)" in outcome
    assert outcome.endswith("given up")

    incident.refresh_from_db()
    assert (incident.webhook_attempts, incident.webhook_next_at, incident.webhook_delivered_at,
            incident.webhook_last_error) == (webhooks.MAX_ATTEMPTS, None, None, "HTTP 500")
    assert len(receiver.got) == webhooks.MAX_ATTEMPTS
    with time_machine.travel(start + timedelta(days=1)):
        assert webhooks.deliver_due() == []
    assert AppliedEvent.objects.count() == 2 + len(webhooks.BACKOFF)
    assert not DeadLetter.objects.exists()


def test_a_redirect_is_a_failed_attempt_not_a_new_target(
    fleet_a: Fleet, ada: Agent, bo: Agent, spool_dir: Path,
) -> None:
    elsewhere = Receiver()
    bouncer = Receiver(status=302, location=elsewhere.url)
    try:
        hooked(fleet_a, bouncer.url)
        intrusion(spool_dir)
        workers.drain_spool()
        [incident] = Incident.objects.all()
        assert "HTTP 302" in webhooks.deliver(incident.pk)
        assert elsewhere.got == [] and len(bouncer.got) == 1
    finally:
        bouncer.close()
        elsewhere.close()


def test_a_fleet_without_a_webhook_owes_no_delivery(
    fleet_a: Fleet, ada: Agent, bo: Agent, spool_dir: Path,
) -> None:
    intrusion(spool_dir)
    workers.drain_spool()
    [incident] = Incident.objects.all()
    assert incident.webhook_next_at is None and webhooks.deliver_due() == []


HOSTILE_URLS = [
    "file:///etc/passwd", "ftp://example.com/x", "gopher://example.com", "javascript:alert(1)",
    "data:text/plain,hi", "//example.com/hook", "example.com/hook", "http://", "http:// x.com",
    "http://exa\u0000mple.com", "http://example.com/\ud800", "http://" + "a" * 600 + ".com",
    "https://example.com/\nhook",
]


@pytest.mark.parametrize("url", HOSTILE_URLS)
def test_the_url_field_refuses_anything_but_an_http_url(fleet_a: Fleet, url: str) -> None:
    fleet_a.incident_webhook_url, fleet_a.incident_webhook_secret = url, SECRET
    with pytest.raises(ValidationError) as caught:
        fleet_a.full_clean()
    assert "incident_webhook_url" in caught.value.message_dict


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "javascript:x"])
def test_the_database_refuses_a_non_http_url_whoever_writes_it(fleet_a: Fleet,
                                                                url: str) -> None:
    with pytest.raises(IntegrityError), transaction.atomic():
        Fleet.objects.filter(pk=fleet_a.pk).update(incident_webhook_url=url,
                                                   incident_webhook_secret=SECRET)
    assert webhooks.post(url, b"{}", {}) == "refused: only http(s) URLs are delivered to"


def test_a_webhook_url_needs_a_secret(fleet_a: Fleet) -> None:
    fleet_a.incident_webhook_url = "https://example.com/hook"
    with pytest.raises(ValidationError) as caught:
        fleet_a.full_clean()
    assert "incident_webhook_secret" in caught.value.message_dict
    with pytest.raises(IntegrityError), transaction.atomic():
        fleet_a.save()


def test_the_admin_never_shows_the_secret_and_blank_keeps_it(
    fleet_a: Fleet, settings: Any,
) -> None:
    """The fleet page's secret field is write-only: the stored secret is never in the
    page, blank keeps it while a URL is set, a new one replaces it, no URL forgets it,
    and hostile text is refused with nothing changed."""
    from django.contrib.auth.models import User
    from django.test import Client

    from fleet.models import RETENTION

    settings.STORAGES = {**settings.STORAGES, "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}
    hooked(fleet_a, "https://example.com/hook")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-1234-root"))
    page_url = f"/admin/fleet/fleet/{fleet_a.pk}/change/"
    page = client.get(page_url).content.decode()
    assert SECRET not in page and "a secret is set" in page
    form = {"slug": fleet_a.slug, "name": fleet_a.name, "memory_mode": fleet_a.memory_mode,
            "capture_mode": fleet_a.capture_mode, "default_lease_ttl_secs": 3600,
            "capture_max_candidates": fleet_a.capture_max_candidates,
            "min_independent_sessions": 1, "repo_url_template": "", "retire_idle_hours": 24,
            "incident_webhook_url": "https://example.com/hook", "incident_webhook_secret": "",
            "moderators-TOTAL_FORMS": 0, "moderators-INITIAL_FORMS": 0,
            **{rule.field: rule.default_days for rule in RETENTION}}

    def saved(**changes: str) -> tuple[int, str, str]:
        response = client.post(page_url, {**form, **changes})
        fleet_a.refresh_from_db()
        return (response.status_code, fleet_a.incident_webhook_url,
                fleet_a.incident_webhook_secret)

    assert saved() == (302, "https://example.com/hook", SECRET)
    assert saved(incident_webhook_secret="s2-" + "x" * 20) == (
        302, "https://example.com/hook", "s2-" + "x" * 20)
    for hostile in ("a\x00b", "x" * 129, "line\nbreak"):
        assert saved(incident_webhook_secret=hostile)[0] == 200, hostile
        assert fleet_a.incident_webhook_secret == "s2-" + "x" * 20
    assert saved(incident_webhook_url="") == (302, "", "")
    assert saved(incident_webhook_url="https://example.com/hook")[0] == 200  # none to keep
    assert fleet_a.incident_webhook_url == ""
