"""The REST rate limit holds under concurrent clients: one count for every web worker."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from fleet import tokens
from fleet.models import Fleet

LIMIT = 120
CLIENTS = 4
EACH = 60  # 240 requests against a limit of 120


@pytest.mark.django_db(transaction=True)
def test_four_concurrent_clients_get_the_limit_and_no_more(live_server: Any, settings: Any) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"token": f"{LIMIT}/min"},
    }
    fleet = Fleet.objects.create(slug="busy", name="busy")
    secret = tokens.issue_token(fleet, role="operator", name="ops").secret
    if 60 - time.time() % 60 < 25:  # start in a fresh minute: the window is the minute
        time.sleep(60 - time.time() % 60 + 0.5)
    codes: list[int] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(EACH):
            request = urllib.request.Request(
                f"{live_server.url}/api/v1/fleets/busy/agents",
                headers={"Authorization": f"Bearer {secret}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    code = response.status
            except urllib.error.HTTPError as exc:
                code = exc.code
                if code == 429:
                    assert int(exc.headers["Retry-After"]) <= 60
            with lock:
                codes.append(code)

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(codes) == CLIENTS * EACH
    assert set(codes) <= {200, 429}
    assert codes.count(200) == LIMIT  # exactly: the count is one atomic upsert
