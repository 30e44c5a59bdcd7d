"""Renders stored in the database: content-addressed, one head per name, old ones pruned."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fleet import artifacts
from fleet.models import CacheArtifact, CacheHead, Fleet


def test_the_head_moves_and_the_etag_is_the_contents(fleet_a: Fleet) -> None:
    now = timezone.now()
    artifacts.publish(fleet_a, {"roster.json": b"one"}, at=now)
    first = artifacts.etag(fleet_a, "roster.json")
    artifacts.publish(fleet_a, {"roster.json": b"two"}, at=now + timedelta(seconds=1))
    second = artifacts.latest(fleet_a, "roster.json")
    assert second is not None and second[1] == b"two" and second[0] != first
    artifacts.publish(fleet_a, {"roster.json": b"one"}, at=now + timedelta(seconds=2))
    assert artifacts.etag(fleet_a, "roster.json") == first  # same bytes, same ETag, one row
    assert CacheArtifact.objects.filter(fleet=fleet_a).count() == 2


def test_it_keeps_the_last_few_renders_per_name(fleet_a: Fleet) -> None:
    now = timezone.now()
    for i in range(artifacts.RENDERS_KEPT + 3):
        artifacts.publish(fleet_a, {"roster.json": b"r%d" % i, "briefing.md": b"b%d" % i},
                          at=now + timedelta(seconds=i))
    for name in ("roster.json", "briefing.md"):
        kept = CacheArtifact.objects.filter(fleet=fleet_a, name=name)
        assert kept.count() == artifacts.RENDERS_KEPT
    latest = artifacts.latest(fleet_a, "roster.json")
    assert latest is not None and latest[1] == b"r%d" % (artifacts.RENDERS_KEPT + 2)


def test_a_file_no_longer_rendered_is_no_longer_served(fleet_a: Fleet) -> None:
    now = timezone.now()
    artifacts.publish(fleet_a, {"snapshot.sqlite": b"s", "roster.json": b"r"}, at=now)
    artifacts.publish(fleet_a, {"roster.json": b"r2"}, at=now + timedelta(seconds=1))
    assert artifacts.latest(fleet_a, "snapshot.sqlite") is None
    assert [f.name for f in artifacts.listing(fleet_a)] == ["roster.json"]
    assert not CacheArtifact.objects.filter(name="snapshot.sqlite").exists()
    assert CacheHead.objects.filter(fleet=fleet_a).count() == 1


def test_a_fleet_with_stored_renders_can_be_deleted_but_a_served_render_cannot_alone(
        fleet_a: Fleet) -> None:
    import pytest
    from django.db.models import RestrictedError

    artifacts.publish(fleet_a, {"roster.json": b"r"}, at=timezone.now())
    served = CacheHead.objects.get(fleet=fleet_a).artifact
    with pytest.raises(RestrictedError):
        served.delete()
    fleet_a.delete()
    assert not CacheArtifact.objects.exists() and not CacheHead.objects.exists()


def test_bodies_are_stored_uncompressed(db: None) -> None:
    """A snapshot barely compresses, and pglz cost a quarter of a one-claim render
    (fleet migration 0017): the body column's storage is EXTERNAL."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT attstorage FROM pg_attribute WHERE attrelid = "
                    "'fleet_cacheartifact'::regclass AND attname = 'body'")
        assert cur.fetchone()[0] == "e"


def test_a_render_moves_all_its_heads_in_one_statement(fleet_a: Fleet) -> None:
    """Five files or one, the heads move in one upsert (a render publishes every second
    under load): the statements touching heads do not grow with the files."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    now = timezone.now()
    names = ["roster.json", "history.json", "handoffs.json", "briefing.md", "manifest.json"]
    counts = []
    for i, files in enumerate(({"roster.json": b"r0"}, {n: b"%s-1" % n.encode() for n in names})):
        artifacts.publish(fleet_a, {n: b"old" for n in names[: len(files)]},
                          at=now + timedelta(seconds=2 * i))
        with CaptureQueriesContext(connection) as q:
            artifacts.publish(fleet_a, files, at=now + timedelta(seconds=2 * i + 1))
        counts.append(sum('"fleet_cachehead"' in x["sql"] for x in q.captured_queries))
    assert counts[0] == counts[1]
    assert {f.name for f in artifacts.listing(fleet_a)} == set(names)
    for name in names:
        latest = artifacts.latest(fleet_a, name)
        assert latest is not None and latest[1] == b"%s-1" % name.encode()
