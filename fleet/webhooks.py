"""Delivering incidents to the fleet's webhook: signed, bounded, retried, never in the way.

An incident with `webhook_next_at` set is owed a delivery. The first attempt is a django-q2
task enqueued after the incident's COMMIT (fleet.incidents); a failed attempt sets the
next one BACKOFF later, and the every-minute schedule (`deliver_due`) makes the attempts
that fall due, until MAX_ATTEMPTS have failed and the incident is given up on
(`webhook_next_at` cleared, `webhook_last_error` kept). Nothing here runs inside a drain's
transaction, so a slow or failing receiver never holds up the spool.

The body is the incident's JSON (fleet.incidents.as_json); the receiver checks
`X-Ctxlake-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed by the fleet's
secret>`. Only http(s) URLs are stored (the model's validator and check constraint), and
redirects are not followed, so no other scheme or host is ever reached through one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F
from django.utils import timezone

from fleet import incidents
from fleet.models import WEBHOOK_SCHEMES, Incident

TIMEOUT_SECS = 5.0
MAX_ATTEMPTS = 5
#: The wait after the n-th failed attempt (n = 1…MAX_ATTEMPTS-1).
BACKOFF = (timedelta(minutes=1), timedelta(minutes=2), timedelta(minutes=4),
           timedelta(minutes=8))
#: An attempt in flight holds the incident this long, so an overlapping schedule run does
#: not send it twice; longer than TIMEOUT_SECS and the task's own timeout.
IN_FLIGHT = timedelta(minutes=2)
#: One schedule run's work: the task must end well inside django-q's 60 s timeout.
BUDGET_SECS = 40.0
SIGNATURE_HEADER = "X-Ctxlake-Signature"
ERROR_MAX_CHARS = 300


def signature(secret: str, body: bytes) -> str:
    """The header value a receiver recomputes: sha256=<hex HMAC-SHA256(secret, body)>."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def body_of(incident: Incident) -> bytes:
    return json.dumps(incidents.as_json(incident), ensure_ascii=False, sort_keys=True).encode()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is then an HTTPError: a failed attempt, never a new target


_OPENER = urllib.request.build_opener(_NoRedirects)


def post(url: str, body: bytes, headers: dict[str, str]) -> str | None:
    """POST once; None on a 2xx answer, else why not (bounded, for the row)."""
    if url.split(":", 1)[0].lower() not in WEBHOOK_SCHEMES:
        return "refused: only http(s) URLs are delivered to"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=TIMEOUT_SECS) as answer:
            answer.read(1024)
            return None
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"{type(e).__name__}: {e}"[:ERROR_MAX_CHARS]


def _take(incident_id: int, now: datetime) -> Incident | None:
    """Claim the attempt that is due (one conditional UPDATE: of two runners one wins)."""
    won = Incident.objects.filter(
        pk=incident_id, webhook_next_at__lte=now, webhook_delivered_at__isnull=True,
        webhook_attempts__lt=MAX_ATTEMPTS,
    ).update(webhook_next_at=now + IN_FLIGHT, webhook_attempts=F("webhook_attempts") + 1)
    if not won:
        return None
    return Incident.objects.select_related("fleet", "actor", "holder").get(pk=incident_id)


def deliver(incident_id: int, *, now: datetime | None = None) -> str:
    """One delivery attempt if one is due; records the outcome. Never raises for the
    receiver's sake: a task that raised would be retried by django-q on top of ours."""
    incident = _take(incident_id, now or timezone.now())
    if incident is None:
        return f"incident {incident_id}: nothing due"
    fleet = incident.fleet
    if not fleet.incident_webhook_url:
        Incident.objects.filter(pk=incident.pk).update(webhook_next_at=None)
        return f"incident {incident_id}: the fleet has no webhook now"
    body = body_of(incident)
    error = post(fleet.incident_webhook_url, body, {
        "Content-Type": "application/json", "User-Agent": "ctxlake-webhook/1",
        "X-Ctxlake-Event": "incident", "X-Ctxlake-Delivery": incidents.ref(incident.pk),
        SIGNATURE_HEADER: signature(fleet.incident_webhook_secret, body),
    })
    return _record(incident, error)


def _record(incident: Incident, error: str | None) -> str:
    done = timezone.now()
    if error is None:
        Incident.objects.filter(pk=incident.pk).update(
            webhook_delivered_at=done, webhook_next_at=None, webhook_last_error="")
        return f"incident {incident.pk}: delivered"
    attempts = incident.webhook_attempts
    later = done + BACKOFF[attempts - 1] if attempts < MAX_ATTEMPTS else None
    Incident.objects.filter(pk=incident.pk).update(
        webhook_next_at=later, webhook_last_error=error[:ERROR_MAX_CHARS])
    verdict = "given up" if later is None else f"retry at {later:%H:%M:%S}Z"
    return f"incident {incident.pk}: attempt {attempts} failed ({error}); {verdict}"


def deliver_due(now: datetime | None = None) -> list[str]:
    """Make the attempts that are due, oldest first, within BUDGET_SECS."""
    now = now or timezone.now()
    started, outcomes = time.monotonic(), []
    due = (Incident.objects.filter(webhook_next_at__lte=now, webhook_delivered_at__isnull=True)
           .order_by("webhook_next_at").values_list("pk", flat=True)[:50])
    for incident_id in due:
        if time.monotonic() - started > BUDGET_SECS - TIMEOUT_SECS:
            break
        outcomes.append(deliver(incident_id, now=now))
    return outcomes
