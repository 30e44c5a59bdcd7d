"""Every redactor fixture through the two real front doors: the bridge's write tools over a
real Spool (the spool line is read back) and the REST API with an agent token (the
database row is read back). A true positive never reaches either; a false positive
arrives unchanged."""

from __future__ import annotations

import json
from typing import Any

import pytest

from claims.models import Claim, Evidence
from fleet.models import Handoff
from mcp_bridge import tools
from mcp_bridge.contract import redact
from tests.fleet.conftest import ApiAs, World, api_as, world  # noqa: F401  (fixtures)
from tests.mcp_bridge.redact_fixtures import FALSE_POSITIVES, TRUE_POSITIVES
from tests.mcp_bridge.test_redact_rules import assert_gone, strings


def _last_spool_line(bridge: tools.Bridge) -> dict[str, Any]:
    """The line just appended, then the file is removed so the next call starts afresh."""
    path = bridge.spool.path
    raw = path.read_bytes().splitlines()[-1]
    path.unlink()
    return json.loads(raw)  # type: ignore[no-any-return]


def _through_bridge(bridge: tools.Bridge, text: str) -> list[dict[str, Any]]:
    tools.fleet_handoff(bridge, summary=text, status="blocked", next=text)
    handoff = _last_spool_line(bridge)
    tools.memory_propose(bridge, claim=text, type="gotcha", subject="redactor fixture",
                         evidence=[{"session_id": "s-1", "message_id": "m-1", "excerpt": text}])
    proposal = _last_spool_line(bridge)
    return [handoff, proposal]


def test_no_true_positive_reaches_the_spool(bridge: tools.Bridge) -> None:
    for case in TRUE_POSITIVES:
        for event in _through_bridge(bridge, case.text):
            assert_gone(case, event)
            assert redact.marker(case.kind) in "\n".join(strings(event["payload"]))


def test_every_false_positive_reaches_the_spool_unchanged(bridge: tools.Bridge) -> None:
    for text in FALSE_POSITIVES:
        handoff, proposal = _through_bridge(bridge, text)
        assert handoff["payload"]["summary"] == text.strip()
        assert handoff["payload"]["next"] == text.strip()
        assert proposal["payload"]["claim"] == text.strip()
        assert proposal["payload"]["evidence"][0]["excerpt"] == text.strip()


def test_a_scan_that_raises_withholds_the_value_from_the_spool(
    bridge: tools.Bridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = TRUE_POSITIVES[0].secrets[0]
    scan = redact._scan

    def boom_on_the_secret(text: str, found: object) -> str:
        if secret in text:
            raise RuntimeError("regex engine exploded")
        return scan(text, found)

    monkeypatch.setattr(redact, "_scan", boom_on_the_secret)
    out = tools.fleet_handoff(bridge, summary=f"note {secret}", status="blocked")
    event = _last_spool_line(bridge)
    assert secret not in json.dumps(event)
    assert event["payload"]["summary"] == redact.WITHHELD
    assert out["redacted"] == ["unscrubbable"]


def test_a_scan_that_raises_on_everything_queues_nothing(
    bridge: tools.Bridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys withheld too: no longer a payload the contract knows, so nothing is written."""
    def boom(text: str, found: object) -> str:
        raise RuntimeError("regex engine exploded")

    monkeypatch.setattr(redact, "_scan", boom)
    secret = TRUE_POSITIVES[0].secrets[0]
    with pytest.raises(tools.Rejected, match="nothing was queued"):
        tools.fleet_handoff(bridge, summary=f"note {secret}", status="blocked")
    assert not bridge.spool.path.exists() or secret not in bridge.spool.path.read_text()


@pytest.fixture
def rest(api_as: ApiAs, world: World) -> tuple[Any, str]:  # noqa: F811
    return api_as(world.ada), f"/api/v1/fleets/{world.fleet.slug}"


def _through_rest(rest: tuple[Any, str], text: str, n: int) -> tuple[Handoff, Evidence]:
    client, base = rest
    r = client.post(f"{base}/handoffs", {"summary": text, "status": "blocked",
                                         "next_steps": text[:2000]}, format="json")
    assert r.status_code == 201, r.content
    handoff = Handoff.objects.get(pk=r.json()["id"])
    r = client.post(f"{base}/claims", {
        "text": f"redactor fixture {n}", "type": "gotcha", "subject": "redactor",
        "evidence": [{"session_id": f"s-{n}", "message_id": "m-1", "excerpt": text}],
    }, format="json")
    assert r.status_code == 201, r.content
    evidence = Evidence.objects.get(claim__text=f"redactor fixture {n}")
    return handoff, evidence


def test_no_true_positive_reaches_the_database_over_rest(rest: tuple[Any, str]) -> None:
    for n, case in enumerate(TRUE_POSITIVES):
        handoff, evidence = _through_rest(rest, case.text, n)
        assert_gone(case, [handoff.summary, handoff.next_steps, evidence.excerpt])
        assert redact.marker(case.kind) in handoff.summary
    assert not Claim.objects.filter(text__contains="AKIA").exists()


def test_every_false_positive_reaches_the_database_unchanged(rest: tuple[Any, str]) -> None:
    for n, text in enumerate(FALSE_POSITIVES):
        handoff, evidence = _through_rest(rest, text, n)
        assert handoff.summary == text.strip()
        assert handoff.next_steps == text.strip()
        assert evidence.excerpt == text.strip()
