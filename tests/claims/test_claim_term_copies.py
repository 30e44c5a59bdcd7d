"""ClaimTerm's copies of its claim's columns (status, number, length) never disagree with
the claim, whichever path writes it: the server's BM25 counts and scores the term rows alone
(claims/search.py), so a stale copy would silently change document frequencies."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from claims import lexicon, moderation, search
from claims.models import Claim, ClaimTerm, text_hash
from fleet.models import Fleet, FleetModerator


def _disagreeing() -> list[tuple[int, str]]:
    """(claim, term) of every term row whose copies differ from its claim's columns."""
    differ = " OR ".join(f"t.{mine} IS DISTINCT FROM c.{theirs}"
                         for mine, theirs in lexicon.COPIES.items())
    with connection.cursor() as cur:
        cur.execute(f"SELECT t.claim_id, t.term FROM claims_claimterm t JOIN claims_claim c "
                    f"ON c.id = t.claim_id WHERE {differ} OR t.fleet_id <> c.fleet_id")
        return list(cur.fetchall())


def test_it_copies_the_claims_columns_on_every_write_path(
    fleet_a: Fleet, mod: User
) -> None:
    FleetModerator.objects.create(fleet=fleet_a, user=mod)
    saved = Claim.objects.create(fleet=fleet_a, text="Flaky tests retry once", subject="ci",
                                 type="fact", text_hash=text_hash("a"))
    [bulk] = Claim.objects.bulk_create([Claim(fleet=fleet_a, number=50, text="Deploys freeze",
                                              subject="deploy", type="fact",
                                              text_hash=text_hash("b"))])
    assert ClaimTerm.objects.filter(claim=bulk).exists() and not _disagreeing()
    copies = ClaimTerm.objects.filter(claim=saved).values_list("status", "number", "length")
    assert set(copies) == {("proposed", saved.number, 5)}  # flaky, test, retri, onc; ci

    Claim.objects.filter(pk=saved.pk).update(status="promoted", scope="fleet",
                                                  promoted_at=timezone.now())
    assert set(ClaimTerm.objects.filter(claim=saved).values_list("status", flat=True)) == {
        "promoted"}
    moderation.retract_claim(Claim.objects.get(pk=saved.pk), by=mod, note="wrong")
    moderation.edit_claim(Claim.objects.get(pk=bulk.pk), by=mod, text="Deploys freeze on "
                          "Fridays after two")
    loaded = Claim.objects.get(pk=bulk.pk)
    loaded.status, loaded.scope, loaded.promoted_at = "promoted", "fleet", timezone.now()
    # no text change: the terms are not rewritten, their copied status follows
    loaded.save(update_fields=["status", "scope", "promoted_at"])
    Claim.objects.filter(fleet=fleet_a).update(status="rejected")  # one statement, many rows
    assert not _disagreeing()
    assert set(ClaimTerm.objects.values_list("status", flat=True)) == {"rejected"}


def test_the_trigger_follows_exactly_the_copied_columns(db: None) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT a.attname FROM pg_trigger g JOIN pg_attribute a ON a.attrelid = g.tgrelid "
            "AND a.attnum = ANY(g.tgattr) WHERE g.tgname = 'claims_term_follows_claim'")
        watched = {row[0] for row in cur.fetchall()}
    assert watched == {"fleet_id", *lexicon.COPIES.values()}


def test_a_collection_filter_on_an_uncopied_column_is_refused(fleet_a: Fleet) -> None:
    """search.collection is the one definition of what BM25 counts over; a filter the term
    rows cannot evaluate is a programming error, not a silently wrong df."""
    clause, _ = search._where(search.collection(fleet_a, ["promoted"]))
    on_terms = search._on_terms(clause)
    assert 't."status"' in on_terms and 't."fleet_id"' in on_terms
    assert '"claims_claim"' not in on_terms
    wider, _ = search._where(search.collection(fleet_a, ["promoted"]).filter(confidence=1))
    with pytest.raises(ValueError, match="confidence"):
        search._on_terms(wider)


def test_a_deleted_claim_leaves_no_terms_whoever_deletes_it(fleet_a: Fleet) -> None:
    """The term rows carry no foreign key constraint (claims.models.ClaimTerm says why):
    Django's cascade deletes them with their claim, and the trigger of migration 0014 does
    for a delete that bypasses Django, as raw SQL does."""
    by_django, by_sql, kept = Claim.objects.bulk_create([
        Claim(fleet=fleet_a, number=n, text=f"Retries hide flaky tests {n}", subject="ci",
              type="fact", text_hash=text_hash(str(n))) for n in (1, 2, 3)])
    assert ClaimTerm.objects.filter(claim__in=[by_django, by_sql, kept]).count() == 3 * 6
    by_django.delete()
    with connection.cursor() as cur:
        cur.execute("DELETE FROM claims_claim WHERE id = %s", [by_sql.pk])
    left = ClaimTerm.objects.values_list("claim_id", flat=True).distinct()
    assert list(left) == [kept.pk]
    fleet_a.delete()  # the fleet's claims and their terms go with it
    assert not ClaimTerm.objects.exists()
