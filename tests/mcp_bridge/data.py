"""Shared test data for the bridge suite (imported by conftest.py and the tests)."""

from __future__ import annotations

import datetime as dt

from mcp_bridge import testing

FLEET, AGENT = "fleet-a", "ada"
NOW = dt.datetime.now(dt.UTC)


def ago(**delta: float) -> str:
    return testing.iso(NOW - dt.timedelta(**delta))


def ahead(**delta: float) -> str:
    return testing.iso(NOW + dt.timedelta(**delta))


CLAIMS = [
    testing.claim("cc-01", "`cargo test --workspace` needs RUSTFLAGS=-D warnings or the clippy "
                  "gate fails later.", type="gotcha", subject="ci", confidence=0.81,
                  independent_sessions=2, contested=True, promoted_at="2026-09-09T10:00:00Z"),
    testing.claim("cc-02", "Stripe webhooks are retried for three days; handlers must be "
                  "idempotent.", subject="payments", independent_sessions=1, confidence=0.9),
    testing.claim("cc-03", "Run database migrations before deploying the web workers.",
                  type="procedure", subject="deploy"),
    testing.claim("cc-04", "The old staging host is staging-1.", subject="deploy",
                  superseded_by="cc-05"),
    testing.claim("cc-05", "The staging host is staging-2 since the move.", subject="deploy"),
    testing.claim("cc-06", "The payments sandbox key rotates weekly.", subject="payments",
                  valid_until=ago(days=1)),
    testing.claim("cc-07", "Flaky pytest fixtures in tests/api come from a shared tmp dir.",
                  subject="tests", stale=True, staleness=0.5),
]
TIMELINE = [
    {"subject": "payments", "at": ago(days=5), "kind": "proposed", "claim_id": "cc-02",
     "session_id": "s1", "actor": "bo", "summary": "proposed: webhooks are retried"},
    {"subject": "payments", "at": ago(days=4), "kind": "promoted", "claim_id": "cc-02",
     "actor": "mod", "summary": "moderator admitted cc-02"},
    {"subject": "payments", "at": ago(days=1), "kind": "session", "session_id": "s9",
     "actor": "cy", "summary": "tried idempotency keys; outcome: merged"},
    {"subject": "ci", "at": ago(days=2), "kind": "contested", "claim_id": "cc-01",
     "actor": "bo", "summary": "contested"},
]
