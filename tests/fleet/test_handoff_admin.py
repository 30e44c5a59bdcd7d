"""The handoff change form never saves over a change it did not show (fleet.admin.HandoffForm)."""

from __future__ import annotations

from typing import Any

from django.test import Client

from fleet import handoffs
from fleet.models import Agent, Handoff


def _as_shown(client: Client, handoff: Handoff) -> dict[str, Any]:
    """The change page's form as a browser would post it back unedited."""
    page = client.get(f"/admin/fleet/handoff/{handoff.pk}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data: dict[str, Any] = {}
    for bound in form:
        value = bound.value()
        widget = bound.field.widget
        if hasattr(widget, "widgets"):  # the split date and time
            parts = widget.decompress(value)
            for i, part in enumerate(parts):
                data[f"{bound.html_name}_{i}"] = "" if part is None else str(part)
        else:
            data[bound.html_name] = "" if value is None else value
    return data


def test_a_form_opened_before_a_pickup_is_refused_and_saves_nothing(
    ada: Agent, bo: Agent, root_client: Client
) -> None:
    client = root_client
    handoff = handoffs.create_handoff(ada, summary="half done", source_trust="operator")
    shown = _as_shown(client, handoff)
    assert shown["seen_version"] == 1
    taken = handoffs.pick_up_handoff(handoff, by=bo, expected_version=1)
    assert isinstance(taken, Handoff)

    response = client.post(f"/admin/fleet/handoff/{handoff.pk}/change/",
                           {**shown, "status": "blocked"})
    assert response.status_code == 200  # the form again, with the error
    assert "changed after the page was opened (version 1, now 2)" in response.content.decode()
    row = Handoff.objects.get(pk=handoff.pk)
    assert (row.state, row.picked_up_by, row.status, row.version) == (
        "picked_up", bo, taken.status, 2)

    fresh = _as_shown(client, handoff)
    response = client.post(f"/admin/fleet/handoff/{handoff.pk}/change/",
                           {**fresh, "status": "blocked"})
    assert response.status_code == 302
    row = Handoff.objects.get(pk=handoff.pk)
    assert (row.state, row.picked_up_by, row.status, row.version) == (
        "picked_up", bo, "blocked", 3)  # the save moved the version on (the trigger)


def test_a_forged_or_missing_version_is_refused(ada: Agent, root_client: Client) -> None:
    client = root_client
    handoff = handoffs.create_handoff(ada, summary="half done")
    shown = _as_shown(client, handoff)
    for forged in ("", "99", "-1", "1e309", "x\x00"):
        response = client.post(f"/admin/fleet/handoff/{handoff.pk}/change/",
                               {**shown, "seen_version": forged, "status": "blocked"})
        assert response.status_code == 200, forged
    assert Handoff.objects.get(pk=handoff.pk).version == 1
