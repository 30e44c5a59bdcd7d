"""fleet.body_memo: a web process reads each rendered body once and serves it again by its
ETag; a new render is read afresh, large bodies are never kept, and the memory is bounded."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import caches
from django.utils import timezone

from fleet import artifacts, binary_sql, body_memo
from fleet.models import Agent, Fleet
from mcp_bridge import contract
from tests.fleet.conftest import ApiAs


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    body_memo.clear()
    yield
    body_memo.clear()


class BodyReads:
    """Counts the statements that read a rendered body (artifacts' _LATEST, through
    binary_sql, which Django's query log does not see)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = binary_sql.execute

        def counted(sql: str, *args: Any, **kwargs: Any) -> Any:
            self.count += sql == artifacts._LATEST
            return real(sql, *args, **kwargs)

        monkeypatch.setattr(binary_sql, "execute", counted)

    @contextmanager
    def counting(self) -> Iterator[list[int]]:
        start, out = self.count, []
        yield out
        out.append(self.count - start)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> BodyReads:
    return BodyReads(monkeypatch)


def _get(api_as: ApiAs, agent: Agent, name: str) -> tuple[int, bytes, str]:
    r = api_as(agent).get(f"/api/v1/fleets/{agent.fleet.slug}/cache/{name}")
    return r.status_code, r.content, r.headers.get("ETag", "")


def test_a_file_read_once_is_served_again_without_reading_its_body(
        fleet_a: Fleet, ada: Agent, api_as: ApiAs, reads: BodyReads) -> None:
    artifacts.publish(fleet_a, {contract.ROSTER: b'{"agents": [1]}'}, at=timezone.now())
    with reads.counting() as first:
        one = _get(api_as, ada, contract.ROSTER)
    with reads.counting() as again:
        two = _get(api_as, ada, contract.ROSTER)
    assert one == two and one[0] == 200 and one[1] == b'{"agents": [1]}'
    assert first == [1] and again == [0]


def test_a_long_poll_answer_inlines_kept_bodies_without_reading_them(
        fleet_a: Fleet, ada: Agent, api_as: ApiAs, reads: BodyReads) -> None:
    """Fifty hosts woken by one render: the first answer reads the bodies, the rest not."""
    artifacts.publish(fleet_a, {contract.MANIFEST: b"{}", contract.ROSTER: b'{"r": 1}',
                                contract.HANDOFFS: b'{"h": 1}'}, at=timezone.now())
    url = f"/api/v1/fleets/{fleet_a.slug}/changes"
    answers, counts = [], []
    for _ in range(3):
        with reads.counting() as n:
            answers.append(api_as(ada).get(url, {"have": ""}).json())
        counts += n
    assert counts == [1, 0, 0]
    assert answers[0]["files"] == answers[1]["files"] == answers[2]["files"]
    assert answers[0]["files"][contract.ROSTER] == '{"r": 1}'


def test_a_new_render_is_read_afresh_and_the_same_bytes_again_are_not(
        fleet_a: Fleet, ada: Agent, api_as: ApiAs, reads: BodyReads) -> None:
    now = timezone.now()
    artifacts.publish(fleet_a, {contract.ROSTER: b"one"}, at=now)
    first = _get(api_as, ada, contract.ROSTER)
    artifacts.publish(fleet_a, {contract.ROSTER: b"two"}, at=now + timedelta(seconds=1))
    with reads.counting() as n:
        second = _get(api_as, ada, contract.ROSTER)
    assert second[1] == b"two" and second[2] != first[2] and n == [1]
    artifacts.publish(fleet_a, {contract.ROSTER: b"one"}, at=now + timedelta(seconds=2))
    with reads.counting() as n:
        third = _get(api_as, ada, contract.ROSTER)
    assert third == first and n == [0]  # the same ETag is the same bytes


def test_a_body_larger_than_the_limit_is_read_every_time(
        fleet_a: Fleet, ada: Agent, api_as: ApiAs, reads: BodyReads) -> None:
    big = b"x" * (body_memo.MAX_BODY_BYTES + 1)
    artifacts.publish(fleet_a, {contract.SNAPSHOT: big}, at=timezone.now())
    for _ in range(2):
        with reads.counting() as n:
            assert _get(api_as, ada, contract.SNAPSHOT)[1] == big
        assert n == [1]


def test_bodies_are_kept_per_fleet_and_the_memory_is_bounded(
        fleet_a: Fleet, fleet_b: Fleet) -> None:
    etag = contract.etag_of("ab" * 32)
    body_memo.put(fleet_a.pk, etag, b"a's")
    assert body_memo.get(fleet_a.pk, etag) == b"a's"
    assert body_memo.get(fleet_b.pk, etag) is None
    most = settings.CACHES[body_memo.ALIAS]["OPTIONS"]["MAX_ENTRIES"]
    etags = [contract.etag_of(hashlib.sha256(b"%d" % i).hexdigest()) for i in range(most * 3)]
    assert len(set(etags)) == len(etags)
    for tag in etags:
        body_memo.put(fleet_a.pk, tag, b"b" * 1000)
    assert len(caches[body_memo.ALIAS]._cache) <= most  # type: ignore[attr-defined]
    assert body_memo.get(fleet_a.pk, etags[-1]) == b"b" * 1000
    assert body_memo.get(fleet_a.pk, etags[0]) is None  # the least recent went first


def test_the_docs_state_the_bound_the_settings_give() -> None:
    api = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    most = settings.CACHES[body_memo.ALIAS]["OPTIONS"]["MAX_ENTRIES"]
    stated = f"at most {most} bodies of\nat most {body_memo.MAX_BODY_BYTES >> 20} MiB"
    assert stated in api or stated.replace("\n", " ") in api
