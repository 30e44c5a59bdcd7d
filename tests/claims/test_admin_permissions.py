"""Who may see and act on which claims in the admin, including hostile requests.

A moderator of fleet A must learn nothing about fleet B and change nothing in it: not
through the list, the review page, a button with a forged id, a bulk action with forged
ids, or a filter value. Without the permission, nothing at all.
"""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.urls import reverse

from claims import moderation
from claims.models import Claim
from fleet.models import Fleet, FleetModerator
from tests.claims.witness import seen_cited

QUEUE = "/admin/claims/claim/review/"
ACTIONS = {
    "promote": {},
    "reject": {"reason": "r"},
    "edit": {"text": "hijacked"},
    "contest": {"note": "n"},
    "retract": {"note": "n"},
    "merge": {"into": "cc-01"},
}


def _propose(fleet: Fleet, text: str = "pytest -x stops at the first failure", n: int = 1) -> Claim:
    evidence = [{"session_id": f"s{n}", "message_id": "m"}]
    seen_cited(fleet, evidence)
    return moderation.propose_claim(
        fleet, text=text, type="fact", subject="pytest", evidence=evidence
    ).claim


def _moderator(name: str, *fleets: Fleet) -> User:
    user = User.objects.create_user(name, password="pw-pw-pw-1234", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    for fleet in fleets:
        FleetModerator.objects.create(fleet=fleet, user=user)
    return user


def _as(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _moderate_url(claim: Claim, action: str) -> str:
    return reverse("admin:claims_claim_moderate", args=(claim.pk, action))


@pytest.fixture
def b_claim(fleet_b: Fleet) -> Claim:
    return _propose(fleet_b, text="fleet b deploys on fridays")


@pytest.fixture
def a_mod(fleet_a: Fleet) -> Client:
    return _as(_moderator("alice", fleet_a))


def _unchanged(claim: Claim) -> None:
    fresh = Claim.objects.get(pk=claim.pk)
    assert (fresh.status, fresh.text, fresh.contested) == ("proposed", claim.text, False)
    assert list(fresh.events.values_list("kind", flat=True)) == ["proposed"]


def test_a_moderator_of_a_sees_none_of_fleet_b_in_lists(
    a_mod: Client, fleet_a: Fleet, b_claim: Claim
) -> None:
    mine = _propose(fleet_a)
    for url in (QUEUE, "/admin/claims/claim/", "/admin/claims/claimevent/"):
        page = a_mod.get(url).content.decode()
        assert "fleet b deploys" not in page and "fleet-b" not in page, url
    assert [c.pk for c in a_mod.get(QUEUE).context["cl"].result_list] == [mine.pk]
    assert [
        c.pk for c in a_mod.get(f"{QUEUE}?fleet={b_claim.fleet_id}").context["cl"].result_list
    ] == []
    assert a_mod.get(f"{QUEUE}?q=fridays").context["cl"].result_count == 0


def test_a_moderator_of_a_cannot_open_fleet_bs_claim(a_mod: Client, b_claim: Claim) -> None:
    change = reverse("admin:claims_claim_change", args=(b_claim.pk,))
    response = a_mod.get(change)
    assert response.status_code == 302 and response["Location"] == "/admin/"
    assert "fleet b deploys" not in a_mod.get("/admin/").content.decode()
    history = reverse("admin:claims_claim_history", args=(b_claim.pk,))
    assert a_mod.get(history).status_code in (302, 404)


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_a_moderator_of_a_cannot_act_on_fleet_b_with_a_forged_id(
    a_mod: Client, fleet_a: Fleet, b_claim: Claim, action: str
) -> None:
    _propose(fleet_a)  # cc-01 exists in fleet A too: a merge target A's moderator can name
    response = a_mod.post(_moderate_url(b_claim, action), ACTIONS[action])
    assert response.status_code == 404
    _unchanged(b_claim)


@pytest.mark.parametrize("action", ["promote_selected", "reject_selected"])
def test_bulk_actions_ignore_forged_ids_of_another_fleet(
    a_mod: Client, fleet_a: Fleet, b_claim: Claim, action: str
) -> None:
    mine = _propose(fleet_a)
    data = {"action": action, "_selected_action": [mine.pk, b_claim.pk], "post": "yes"}
    response = a_mod.post(QUEUE, {**data, "reason": "spam"})
    assert response.status_code == 302
    _unchanged(b_claim)
    assert Claim.objects.get(pk=mine.pk).status != "proposed"


def test_a_merge_cannot_reach_into_another_fleet(
    a_mod: Client, fleet_a: Fleet, b_claim: Claim
) -> None:
    mine = _propose(fleet_a, text="something else entirely")
    mine.refresh_from_db()
    # b_claim is cc-01 of fleet B; in fleet A "cc-01" names A's own claim, never B's.
    response = a_mod.post(_moderate_url(mine, "merge"), {"into": "cc-02"})
    assert "No other claim cc-02 in this fleet" in str(list(get_messages(response.wsgi_request))[0])
    assert b_claim.evidence.count() == 1
    _unchanged(b_claim)


def test_a_moderator_of_both_fleets_sees_both(
    fleet_a: Fleet, fleet_b: Fleet, b_claim: Claim
) -> None:
    client = _as(_moderator("both", fleet_a, fleet_b))
    _propose(fleet_a)
    assert client.get(QUEUE).context["cl"].result_count == 2


def test_a_superuser_sees_every_fleet(client: Client, fleet_a: Fleet, b_claim: Claim) -> None:
    client.force_login(User.objects.create_superuser("root", password="x"))
    _propose(fleet_a)
    assert client.get(QUEUE).context["cl"].result_count == 2
    client.post(_moderate_url(b_claim, "promote"))
    assert Claim.objects.get(pk=b_claim.pk).status == "promoted"


def test_the_permission_without_a_grant_shows_an_empty_queue(
    client: Client, mod: User, fleet_a: Fleet
) -> None:
    claim = _propose(fleet_a)
    client.force_login(mod)  # holds claims.promote_claim, moderates no fleet
    assert client.get(QUEUE).context["cl"].result_count == 0
    assert client.post(_moderate_url(claim, "promote")).status_code == 404
    _unchanged(claim)


def test_a_grant_without_the_permission_shows_nothing(client: Client, fleet_a: Fleet) -> None:
    staff = User.objects.create_user("staff", is_staff=True)
    FleetModerator.objects.create(fleet=fleet_a, user=staff)
    claim = _propose(fleet_a)
    client.force_login(staff)
    assert client.get(QUEUE).status_code == 403
    assert client.get(reverse("admin:claims_claim_change", args=(claim.pk,))).status_code in (
        302,
        403,
    )
    assert client.post(_moderate_url(claim, "promote")).status_code == 404
    data = {"action": "promote_selected", "_selected_action": [claim.pk], "post": "yes"}
    assert client.post(QUEUE, data).status_code == 403
    _unchanged(claim)
    assert "Claims" not in client.get("/admin/").content.decode()


def test_anonymous_and_non_staff_users_are_sent_to_log_in(client: Client, fleet_a: Fleet) -> None:
    claim = _propose(fleet_a)
    assert client.post(_moderate_url(claim, "promote"))["Location"].startswith("/admin/login/")
    user = User.objects.create_user("plain", password="x")
    user.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    FleetModerator.objects.create(fleet=fleet_a, user=user)
    client.force_login(user)
    assert client.post(_moderate_url(claim, "promote"))["Location"].startswith("/admin/login/")
    _unchanged(claim)


def test_a_revoked_grant_stops_the_next_action(client: Client, fleet_a: Fleet) -> None:
    user = _moderator("leaver", fleet_a)
    claim = _propose(fleet_a)
    client.force_login(user)
    assert client.get(reverse("admin:claims_claim_change", args=(claim.pk,))).status_code == 200
    FleetModerator.objects.filter(user=user).delete()
    assert client.post(_moderate_url(claim, "promote")).status_code == 404
    _unchanged(claim)


def test_the_grant_is_managed_on_the_fleet_page(client: Client, fleet_a: Fleet, mod: User) -> None:
    client.force_login(User.objects.create_superuser("root", password="x"))
    url = reverse("admin:fleet_fleet_change", args=(fleet_a.pk,))
    page = client.get(url)
    assert page.status_code == 200 and "moderators-TOTAL_FORMS" in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_two_racing_promotes_one_wins_and_the_other_is_told(fleet_a: Fleet) -> None:
    """Two moderators press Promote at the same moment, each on their own connection."""
    claim = _propose(fleet_a)
    clients = [_as(_moderator(f"m{i}", fleet_a)) for i in range(2)]
    start = threading.Barrier(2)
    said: list[str] = []

    def press(client: Client) -> None:
        try:
            start.wait()
            response = client.post(_moderate_url(claim, "promote"))
            said.extend(str(m) for m in get_messages(response.wsgi_request))
        finally:
            connection.close()

    threads = [threading.Thread(target=press, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(said) == sorted(
        [
            f"Promoted {claim.public_id}; agents will see it.",
            f"Someone got there first: {claim.public_id} is already promoted.",
        ]
    )
    assert Claim.objects.get(pk=claim.pk).events.filter(kind="promoted").count() == 1
