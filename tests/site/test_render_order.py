"""Two renders of one fleet at once, with a change in between: the newer state is what
stays published (renders of a fleet are serialised; one that read older rows never
publishes after a newer one)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from ctxlake_site import paths, workers
from fleet import cache_render
from fleet.models import Agent, Fleet, Handoff
from tests.helpers import until_an_advisory_lock_is_awaited


def _handoff_summaries(fleet: Fleet) -> list[str]:
    data = json.loads((paths.cache_dir() / fleet.slug / "handoffs.json").read_text())
    return sorted(h["summary"] for h in data["handoffs"])



@pytest.mark.django_db(transaction=True)
def test_a_slow_older_render_never_publishes_over_a_newer_one(
    spool_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = Fleet.objects.create(slug="order", name="order")
    ada = Agent.objects.create(fleet=fleet, agent_id="ada")
    Handoff.objects.create(fleet=fleet, from_agent=ada, summary="first", status="blocked")
    read_done, errors = threading.Event(), []
    original = cache_render.render_handoffs

    def slow_first(f: Fleet, **kw: Any) -> dict[str, Any]:
        body = original(f, **kw)
        if threading.current_thread().name == "older":
            read_done.set()
            until_an_advisory_lock_is_awaited("the newer render")  # then the older one publishes
        return body

    monkeypatch.setattr(cache_render, "render_handoffs", slow_first)

    def render(name: str) -> None:
        try:
            workers.render_fleet(Fleet.objects.get(pk=fleet.pk))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    older = threading.Thread(target=render, args=("older",), name="older")
    older.start()
    assert read_done.wait(30)
    Handoff.objects.create(fleet=fleet, from_agent=ada, summary="second", status="done")
    newer = threading.Thread(target=render, args=("newer",), name="newer")
    newer.start()
    older.join(60)
    newer.join(60)
    assert errors == []
    assert _handoff_summaries(fleet) == ["first", "second"]
