"""Embeddings with the real offline model: storing, model changes, near duplicates."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from claims import embeddings, moderation, tasks
from claims.models import Claim
from fleet.models import Fleet


def _propose(fleet: Fleet, text: str, session: str = "s1", **kw: Any) -> Claim:
    return moderation.propose_claim(
        fleet,
        text=text,
        type="gotcha",
        subject="ci",
        evidence=[{"session_id": session, "message_id": f"m-{text[:8]}"}],
        **kw,
    ).claim


def test_it_embeds_pending_claims_with_the_model_name(fleet_a: Fleet) -> None:
    claim = _propose(fleet_a, "The CI cache must be cleared after bumping the Rust toolchain")
    assert embeddings.needing_embedding().count() == 1
    tasks.embed_pending()
    claim.refresh_from_db()
    assert claim.embedding_model == embeddings.embedder().NAME
    assert len(claim.embedding) == 384
    assert embeddings.needing_embedding().count() == 0


def test_a_model_change_marks_claims_for_reembedding(fleet_a: Fleet) -> None:
    claim = _propose(fleet_a, "Deploys need the VPN")
    tasks.embed_pending()
    Claim.objects.filter(pk=claim.pk).update(embedding_model="some-older-model")
    out = StringIO()
    call_command("reembed_claims", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {
        "to_embed": 1,
        "model": embeddings.embedder().NAME,
        "committed": False,
    }
    call_command("reembed_claims", "--commit", "--quiet", stdout=StringIO())
    claim.refresh_from_db()
    assert claim.embedding_model == embeddings.embedder().NAME


def test_a_near_duplicate_stays_in_the_queue_labelled_and_the_older_claim_is_untouched(
    fleet_a: Fleet,
) -> None:
    """Behaviour changed by issue 13: near duplicates were folded in automatically; now a
    person decides, and the queue says which claim it repeats and how closely."""
    first = _propose(fleet_a, "Run make lint before pushing or CI rejects the branch.", "s1")
    tasks.embed_pending()
    second = _propose(fleet_a, "Run make lint before pushing, or the CI rejects the branch!", "s2")
    unrelated = _propose(fleet_a, "The staging database is reset every Sunday night.", "s3")
    tasks.embed_pending()
    second.refresh_from_db()
    first.refresh_from_db()
    unrelated.refresh_from_db()
    assert second.status == "proposed"
    assert second.near_claim == first and second.near_relation == "duplicate"
    assert second.near_similarity >= 0.95
    assert not first.events.filter(kind="corroborated").exists()
    assert first.evidence.count() == 1
    assert unrelated.status == "proposed" and unrelated.near_relation == ""


def test_nearest_finds_paraphrases_above_unrelated_claims(fleet_a: Fleet) -> None:
    probe = _propose(fleet_a, "Tests fail unless the Redis server is running locally.")
    para = _propose(fleet_a, "You need a local Redis running or the test suite fails.", "s2")
    _propose(fleet_a, "Invoices are rounded to the nearest cent.", "s3")
    tasks.embed_pending()
    probe.refresh_from_db()
    (best, similarity), *_ = embeddings.nearest(probe)
    assert best == para and 0.6 < similarity < 1.0


def test_nearest_compares_vectors_of_the_current_model_only(fleet_a: Fleet) -> None:
    """A vector another model made lives in another space: it is no neighbour until
    `reembed_claims` redoes it (the model's name is on every claim)."""
    probe = _propose(fleet_a, "Tests fail unless the Redis server is running locally.")
    para = _propose(fleet_a, "You need a local Redis running or the test suite fails.", "s2")
    tasks.embed_pending()
    Claim.objects.filter(pk=para.pk).update(embedding_model="an-older-model")
    probe.refresh_from_db()
    assert embeddings.nearest(probe) == []
    Claim.objects.filter(pk=probe.pk).update(embedding_model="an-older-model")
    probe.refresh_from_db()
    assert embeddings.nearest(probe) == []  # the probe's own vector is of the old model


def test_reembed_reports_progress_with_the_model_name(fleet_a: Fleet) -> None:
    for i in range(3):
        _propose(fleet_a, f"Claim number {i} about the deploy VPN", f"s{i}")
    out = StringIO()
    call_command("reembed_claims", "--all", "--commit", "--batch", "2", stdout=out)
    name = embeddings.embedder().NAME
    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"  2/3 embedded with {name} (") and "claims/s" in lines[0]
    assert lines[1].startswith(f"  3/3 embedded with {name} (")
    assert lines[-1] == f"Embedded 3 claim(s) with {name}."


@pytest.mark.parametrize("batch", ["0", "-3"])
def test_reembed_refuses_a_bad_batch_size(db: None, batch: str) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="batch"):
        call_command("reembed_claims", "--batch", batch)


def test_nearest_each_finds_for_every_claim_what_nearest_finds(
    fleet_a: Fleet, fleet_b: Fleet
) -> None:
    """One statement labels a whole embedding pass: the same neighbour and similarity as
    `nearest` per claim, within the claim's fleet, of the current model, never itself."""
    texts = [
        "Tests fail unless the Redis server is running locally.",
        "You need a local Redis running or the test suite fails.",
        "Invoices are rounded to the nearest cent.",
        "Run make lint before pushing or CI rejects the branch.",
        "The staging database is reset every Sunday night.",
        "Staging data is wiped each Sunday evening.",
    ]
    mine = [_propose(fleet_a, t, f"s{i}") for i, t in enumerate(texts)]
    alone = _propose(fleet_b, texts[0], "s9")  # fleet_b's only claim: no neighbour at all
    other_model = _propose(fleet_a, "Tests fail unless a Redis server runs locally!", "s8")
    tasks.embed_pending()
    Claim.objects.filter(pk=other_model.pk).update(embedding_model="an-older-model")
    pks = [c.pk for c in (*mine, alone, other_model)]

    found = embeddings.nearest_each(Claim.objects.filter(pk__in=pks), statuses=moderation.LIVE)

    assert set(found) == {c.pk for c in mine}
    for claim in mine:
        claim.refresh_from_db()
        ((near, similarity),) = embeddings.nearest(claim, limit=1, statuses=moderation.LIVE)
        got_claim, got_near, got_similarity = found[claim.pk]
        assert (got_claim.pk, got_near.pk) == (claim.pk, near.pk)
        assert got_near.text == near.text
        assert got_similarity == pytest.approx(similarity, abs=1e-5)


def test_labelling_a_pass_of_proposals_takes_the_same_statements_for_3_as_for_12(
    fleet_a: Fleet,
) -> None:
    """The labels of a burst cost a fixed number of statements, not a scan, a transaction
    and an update per proposal."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    claims = [_propose(fleet_a, f"Service {i} restarts at {i} am daily.", f"s{i}")
              for i in range(12)]
    tasks.embed_pending()
    counts = []
    for n in (3, 12):
        ids = [c.pk for c in claims[:n]]
        with CaptureQueriesContext(connection) as q:
            labelled = tasks.label_neighbours(Claim.objects.filter(pk__in=ids, status="proposed"))
        counts.append(len(q.captured_queries))
        assert labelled >= 2  # near-identical texts: labels written in both passes
    assert counts[0] == counts[1]


def test_claim_vectors_are_stored_in_the_row(db: None) -> None:
    """Inline vectors: a neighbour scan reads each row once, not each row and its TOAST
    entry (claims migration 0015)."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT attstorage FROM pg_attribute "
            "WHERE attrelid = 'claims_claim'::regclass AND attname = 'embedding'"
        )
        assert cur.fetchone() == ("p",)


def test_needing_embedding_finds_the_waiting_claims_through_indexes_alone(fleet_a: Fleet) -> None:
    """A claim waits when it has no vector or one of another model (named before or after
    the current one); the pass after each burst finds them without a scan of the table."""
    from django.db import connection

    claims = [_propose(fleet_a, f"Fact number {i} about the deploy", f"s{i}") for i in range(4)]
    tasks.embed_pending()
    name = embeddings.embedder().NAME
    Claim.objects.filter(pk=claims[1].pk).update(embedding=None, embedding_model="")
    Claim.objects.filter(pk=claims[2].pk).update(embedding_model="")  # before any name
    Claim.objects.filter(pk=claims[3].pk).update(embedding_model=name + "-next")  # after it
    waiting = embeddings.needing_embedding()
    assert set(waiting.values_list("pk", flat=True)) == {c.pk for c in claims[1:]}
    assert set(embeddings.needing_embedding(fleet_a).values_list("pk", flat=True)) == {
        c.pk for c in claims[1:]}

    sql, params = waiting.values_list("pk").query.sql_with_params()
    with connection.cursor() as cur:
        # A tiny table, with statistics left by earlier tests: force the plan's hand. Off
        # too: reading a whole unrelated index and filtering each row, which the planner
        # took once for rows=1; what must remain possible is answering by index conditions.
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("SET LOCAL enable_indexscan = off")
        cur.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cur.fetchall())
    assert "Seq Scan" not in plan and "Filter" not in plan, plan
    assert "claims_claim_unembedded" in plan, plan


def test_nearest_each_skips_a_pair_whose_claim_is_deleted_between_its_two_reads(
    fleet_a: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The neighbours are found in one statement and read in a second: a claim deleted in
    between (its fleet deleted, say) drops its pairs instead of failing the whole pass."""
    first = _propose(fleet_a, "Tests fail unless the Redis server is running locally.")
    second = _propose(fleet_a, "You need a local Redis running or the test suite fails.", "s2")
    tasks.embed_pending()
    real_read = embeddings._read_pairs

    def read_pairs(pairs: dict[int, int]) -> Any:
        Claim.objects.filter(pk=second.pk).delete()
        return real_read(pairs)

    monkeypatch.setattr(embeddings, "_read_pairs", read_pairs)
    found = embeddings.nearest_each(
        Claim.objects.filter(pk__in=[first.pk, second.pk]), statuses=moderation.LIVE
    )
    assert found == {}
