"""`manage.py claims`: the same gate as the admin, for operators without a browser."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from claims import moderation
from claims.models import Claim
from fleet.models import Fleet, FleetModerator
from tests.claims.witness import seen_cited

TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _propose(fleet: Fleet, text: str = "pytest -x stops at the first failure", n: int = 1) -> Claim:
    evidence = [{"session_id": f"s{n}", "message_id": "m", "path": "src/a.py"}]
    seen_cited(fleet, evidence)
    return moderation.propose_claim(
        fleet, text=text, type="fact", subject="pytest", evidence=evidence
    ).claim


def _run(*args: str) -> str:
    out = StringIO()
    call_command("claims", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def fleet_mod(mod: User, fleet_a: Fleet) -> User:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    return mod


def test_it_lists_proposed_claims_oldest_first(
    fleet_a: Fleet, fleet_b: Fleet, fleet_mod: User
) -> None:
    first = _propose(fleet_a, "first claim")
    moderation.promote_claim(_propose(fleet_a, "promoted one", n=2), by=fleet_mod)
    _propose(fleet_b, "fleet b's claim")
    out = _run("list", "--status", "proposed")
    assert out.index("first claim") < out.index("fleet b's claim")
    assert "promoted one" not in out and out.endswith("2 claim(s)\n")
    only_a = _run("list", "--fleet", "fleet-a")
    assert "fleet b's" not in only_a and first.public_id in only_a


def test_it_lists_as_json(fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    (row,) = json.loads(_run("list", "--json"))
    assert row["id"] == claim.public_id and row["fleet"] == "fleet-a"
    assert (row["status"], row["independent_sessions"]) == ("proposed", 1)


def test_it_shows_hidden_characters_in_a_terminal(fleet_a: Fleet) -> None:
    _propose(fleet_a, "run make\u202e test")
    out = _run("list")
    assert "run make<U+202E> test" in out and "\u202e" not in out


def test_it_shows_one_claim_with_the_gates_verdict(fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    out = _run("show", claim.public_id, "--fleet", "fleet-a")
    assert "evidence [verified] s1/m" in out and "gate: open" in out
    claim.evidence.update(excerpt=f"token {TOKEN}")
    assert "gate: it contains what looks like a secret" in _run(
        "show", "cc-01", "--fleet", "fleet-a"
    )


def test_it_promotes_through_the_gate(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    out = _run("promote", claim.public_id, "--fleet", "fleet-a", "--as", "mod", "--note", "ok")
    assert out == f"{claim.public_id} is now promoted\n"
    claim.refresh_from_db()
    assert (claim.status, claim.promoted_by) == ("promoted", fleet_mod)
    assert claim.events.get(kind="promoted").note == "ok"


def test_it_rejects_with_a_reason(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    _run("reject", "cc-01", "--fleet", "fleet-a", "--reason", "wrong", "--as", "mod")
    claim.refresh_from_db()
    assert claim.status == "rejected" and claim.events.get(kind="rejected").note == "wrong"


def test_it_contests_and_retracts(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = moderation.promote_claim(_propose(fleet_a), by=fleet_mod)
    out = _run("contest", "cc-01", "--fleet", "fleet-a", "--note", "flaky", "--as", "mod")
    assert out == "cc-01 is now promoted (contested)\n"
    _run("retract", "cc-01", "--fleet", "fleet-a", "--note", "wrong", "--as", "mod")
    claim.refresh_from_db()
    assert claim.status == "retracted"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["promote", "cc-09", "--fleet", "fleet-a", "--as", "mod"], "No claim 'cc-09'"),
        (["promote", "nonsense", "--fleet", "fleet-a", "--as", "mod"], "No claim 'nonsense'"),
        (["promote", "cc-01", "--fleet", "nope", "--as", "mod"], "No fleet 'nope'"),
        (["promote", "cc-01", "--fleet", "fleet-a", "--as", "ghost"], "No user 'ghost'"),
        (["reject", "cc-01", "--fleet", "fleet-a", "--reason", " ", "--as", "mod"], "reason"),
        (["list", "--fleet", "nope"], "No fleet 'nope'"),
    ],
)
def test_it_fails_clearly_on_bad_input(
    fleet_a: Fleet, fleet_mod: User, args: list[str], message: str
) -> None:
    claim = _propose(fleet_a)
    with pytest.raises(CommandError, match=message):
        _run(*args)
    claim.refresh_from_db()
    assert claim.status == "proposed"


def test_it_refuses_a_user_who_may_not_moderate_the_fleet(
    fleet_a: Fleet, fleet_b: Fleet, mod: User
) -> None:
    FleetModerator.objects.create(fleet=fleet_b, user=mod)
    _propose(fleet_a)
    with pytest.raises(CommandError, match="may not moderate"):
        _run("promote", "cc-01", "--fleet", "fleet-a", "--as", "mod")


def test_public_ids_are_per_fleet(fleet_a: Fleet, fleet_b: Fleet, fleet_mod: User) -> None:
    a = _propose(fleet_a, "in a")
    b = _propose(fleet_b, "in b")
    assert a.public_id == b.public_id == "cc-01"
    with pytest.raises(CommandError, match="may not moderate"):
        _run("promote", "cc-01", "--fleet", "fleet-b", "--as", "mod")
    _run("promote", "cc-01", "--fleet", "fleet-a", "--as", "mod")
    assert Claim.objects.get(pk=a.pk).status == "promoted"
    assert Claim.objects.get(pk=b.pk).status == "proposed"


def test_it_refuses_a_secret_and_a_second_promotion(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    claim.evidence.update(excerpt=f"token {TOKEN}")
    with pytest.raises(CommandError, match="secret"):
        _run("promote", "cc-01", "--fleet", "fleet-a", "--as", "mod")
    claim.evidence.update(excerpt="clean now")
    _run("promote", "cc-01", "--fleet", "fleet-a", "--as", "mod")
    with pytest.raises(CommandError, match="already promoted"):
        _run("promote", "cc-01", "--fleet", "fleet-a", "--as", "mod")


def test_it_supersedes_sets_valid_until_and_merges(fleet_a: Fleet, fleet_mod: User) -> None:
    old = _propose(fleet_a)
    moderation.promote_claim(old, by=fleet_mod)
    new = _propose(fleet_a, "pytest -x stops at the first error or failure", n=2)
    args = ("--fleet", fleet_a.slug, "--as", "mod")
    with pytest.raises(CommandError, match="No claim 'cc-99'"):
        _run("supersede", old.public_id, *args, "--by", "cc-99")
    out = _run("supersede", old.public_id, *args, "--by", new.public_id, "--note", "reworded")
    assert f"superseded by {new.public_id}" in out
    new.refresh_from_db()
    assert new.status == "promoted"
    out = _run("valid-until", new.public_id, "2030-01-01T00:00:00Z", *args)
    assert "valid until 2030-01-01" in out
    out = _run("valid-until", new.public_id, "none", *args)
    assert "valid until" not in out
    dup = _propose(fleet_a, "Run pytest with -x to stop at the first failure", n=3)
    _run("merge", dup.public_id, *args, "--into", new.public_id)
    dup.refresh_from_db()
    new.refresh_from_db()
    assert dup.status == "rejected" and new.independent_sessions == 2


@pytest.mark.parametrize("until", ["tomorrow", "2027-01-01T00:00:00"])
def test_valid_until_refuses_a_time_without_a_zone(
    fleet_a: Fleet, fleet_mod: User, until: str
) -> None:
    claim = _propose(fleet_a)
    with pytest.raises(CommandError, match="ISO 8601"):
        _run("valid-until", claim.public_id, until, "--fleet", fleet_a.slug, "--as", "mod")


def test_recount_drops_sessions_the_fleet_never_saw(fleet_a: Fleet, fleet_mod: User) -> None:
    claim = _propose(fleet_a)
    Claim.objects.filter(pk=claim.pk).update(independent_sessions=3)  # counted the old way
    out = _run("recount", "--fleet", fleet_a.slug)
    assert f"{claim.public_id:<8} 3 -> 1" in out and "would change" in out
    claim.refresh_from_db()
    assert claim.independent_sessions == 3
    _run("recount", "--commit")
    claim.refresh_from_db()
    assert claim.independent_sessions == 1
    assert claim.events.latest("at").data["recount"] is True
    assert "0 claim(s)" in _run("recount")
