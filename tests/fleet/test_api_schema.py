"""Fuzz every documented endpoint from the OpenAPI schema with a valid operator token.

Schemathesis generates bounded examples per operation against the WSGI app (no server):
no answer may be a 5xx, and every answer must match the schema's status codes, content
types, headers and response bodies. Path parameters mostly name the real fleet and
objects, so the handlers are reached rather than a 404 at the door.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis import checks

from ctxlake_site.wsgi import application
from fleet import tokens
from tests.fleet.conftest import World


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


@pytest.fixture(autouse=True)
def _keep_the_test_transaction() -> Iterator[None]:
    """The real WSGI handler closes the connection after each request, which would end the
    test's transaction; Django's own test client unhooks the same signals."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def operator_secret(world: World) -> str:
    return tokens.issue_token(world.fleet, role="operator", name="fuzzer").secret


# Loaded at collection (no database access: the schema view needs none).
schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
]


def _aim(case: Any, world: World) -> None:
    """Point most cases at the real fleet and its objects; some stay random (404 paths)."""
    params = case.path_parameters or {}
    if "fleet" in params and random.random() < 0.9:
        params["fleet"] = world.fleet.slug
    if "claim_id" in params and random.random() < 0.7:
        params["claim_id"] = random.choice([world.promoted.public_id, world.proposed.public_id])
    if "pk" in params and random.random() < 0.7:
        params["pk"] = world.handoff.pk
    if "session_id" in params and random.random() < 0.7:
        params["session_id"] = world.session.session_id


@pytest.mark.slow
@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_it_answers_every_generated_request_within_the_schema(
    case: Any, world: World, operator_secret: str
) -> None:
    _aim(case, world)
    case.call_and_validate(headers={"Authorization": f"Bearer {operator_secret}"}, checks=CHECKS)


def test_every_operation_is_a_test_of_its_own() -> None:
    """Each operation's test has its own id (tests/fleet/conftest.py), so a report names
    the operation and pytest-xdist runs every one of them, not one of the 38."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
                           __file__], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ids = [line for line in done.stdout.splitlines() if "::test_it_answers" in line]
    operations = [result.ok().label for result in schema.get_all_operations()]
    assert len(set(ids)) == len(ids) == len(operations) > 30
    assert {i.split("[", 1)[1].removesuffix("]") for i in ids} == set(operations)
