"""Personas shared by the whole suite: two fleets and the people and agents in them.

- fleet_a, fleet_b: two fleets that must never see each other's data
- ada: an agent in fleet_a (all scopes); bo: an agent in fleet_a (read-only)
- cy: an agent in fleet_b
- mod: a staff moderator holding claims.promote_claim
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from fleet import change_feed
from fleet.models import Agent, Fleet

#: The real clients' closing matrix: the controller of an xdist run, which loads no
#: sub-folder's conftest, must have its hooks too.
pytest_plugins = ["tests.realclients.matrix"]

_EMBEDDED_WAS_RUNNING = pytest.StashKey[bool | None]()


def pytest_configure(config: Any) -> None:
    """Bridges the tests start embed in their own process: the host's shared embedder
    (mcp_bridge.embed_service) would otherwise be started once per test's CTXLAKE_HOME and
    outlive the test. tests/mcp_bridge/test_embed_service.py runs it on purpose.

    Whether the embedded server was running before the run is noted, so that a run which
    started it stops it at the end (pytest_sessionfinish) instead of leaving it behind."""
    os.environ.setdefault("CTXLAKE_EMBED_SHARED", "off")
    if not hasattr(config, "workerinput"):
        from tests.leftovers import embedded_server_running

        config.stash[_EMBEDDED_WAS_RUNNING] = embedded_server_running()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a run in which two tests share an id: pytest-xdist hands out tests by id and
    runs one of them (the 38 schemathesis operations once ran as 1; tests/fleet/conftest.py)."""
    shared = sorted(nodeid for nodeid, n in Counter(i.nodeid for i in items).items() if n > 1)
    if shared:
        raise pytest.UsageError(f"{len(shared)} test id(s) shared by more than one test, "
                                f"e.g. {shared[0]}")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """pytest-django's, plus: stop this process's change-feed listener before the test
    database is dropped (its LISTEN connection would keep the database from dropping)."""
    yield
    change_feed.FEED.stop()


@pytest.fixture(autouse=True)
def _test_settings(settings: Any) -> None:
    """A fast password hasher (PBKDF2 costs ~0.3 s per persona; tests check logic, not key
    stretching) and plain static files, so no test depends on whether collectstatic ran."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture
def root_client(db: None) -> Client:
    """A client logged in as a superuser (the admin's pages, unscoped)."""
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw-1234-root"))
    return client


@pytest.fixture
def fleet_a(db: None) -> Fleet:
    return Fleet.objects.create(slug="fleet-a", name="Fleet A", memory_mode="live")


@pytest.fixture
def fleet_b(db: None) -> Fleet:
    return Fleet.objects.create(slug="fleet-b", name="Fleet B", memory_mode="live")


@pytest.fixture
def ada(fleet_a: Fleet) -> Agent:
    return Agent.objects.create(fleet=fleet_a, agent_id="ada", runtime="claude-code")


@pytest.fixture
def bo(fleet_a: Fleet) -> Agent:
    return Agent.objects.create(fleet=fleet_a, agent_id="bo", runtime="cursor")


@pytest.fixture
def cy(fleet_b: Fleet) -> Agent:
    return Agent.objects.create(fleet=fleet_b, agent_id="cy", runtime="codex")


@pytest.fixture
def mod(db: None) -> User:
    user = User.objects.create_user("mod", password="mod-pass-1234", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    return user


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if it left its test database behind on the server (a failed teardown
    — e.g. a connection left open — only prints a warning that is easy to miss); then stop
    the embedded server if this run started it."""
    from tests.leftovers import stop_embedded_server_we_started

    try:
        _check_test_databases(session)
    finally:
        if not hasattr(session.config, "workerinput"):
            stop_embedded_server_we_started(
                session.config.stash.get(_EMBEDDED_WAS_RUNNING, None))


def _check_test_databases(session: pytest.Session) -> None:
    from tests.leftovers import leftover_test_databases

    if session.config.getoption("reuse_db", False) or hasattr(session.config, "workerinput"):
        return  # kept on purpose; under xdist the controller checks once for all workers
    if session.config.option.collectonly:
        return  # made none (a test collecting the suite runs while the suite's are up)
    left = leftover_test_databases()
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = (f"test database(s) left behind on the server: {', '.join(left)} "
                   "(a teardown failed; see the warnings above)")
        if reporter:
            reporter.ensure_newline()
            reporter.write_line(f"ERROR: {message}", red=True, bold=True)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
