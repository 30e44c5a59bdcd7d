"""Every place a lease pattern meets a path answers tests/mcp_bridge/glob_cases.py alike.

Issue 28: the matcher used to be written three times, and a lease on `src/[ab].py` marked
a claim citing `src/c.py` possibly stale and made the guard warn, while fleet_claim's
recall and the briefing left it out. Now each caller is asked the same table: the
contract itself, the server's staleness marks and contention check, the commit/PreToolUse
guard, the bridge's path recall (snapshot for_paths), the briefing's path claims, and the
write-rules block. The database-backed callers get the whole table too: each case is one
claim or two leases, fast enough not to need a subset.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.utils import timezone

from claims import snapshot_render, staleness
from claims.models import Claim, Evidence, text_hash
from claims.moderation import clean_citations
from fleet import leases
from fleet.models import Agent, Fleet
from mcp_bridge import guard, rules, testing
from mcp_bridge.contract import globs
from mcp_bridge.snapshot import Snapshot
from tests.mcp_bridge.glob_cases import COVERS, OVERLAPS

SUBJECT = "unrelated"  # a one-word subject no pattern names: only the cited path relates


def _names_a_path(text: str) -> bool:
    try:
        globs.normalise(text)
    except globs.BadPath:
        return False
    return True


# Leases and citations reach the server as agents send them; a lease that names nothing
# is refused before any caller sees it, so the server-side callers get the valid ones.
SERVER_COVERS = [c for c in COVERS if _names_a_path(c[0]) and _names_a_path(c[1])]
SERVER_OVERLAPS = [c for c in OVERLAPS if _names_a_path(c[0]) and _names_a_path(c[1])]


@pytest.mark.parametrize(("pattern", "path", "expected"), COVERS)
def test_the_contract_covers(pattern: str, path: str, expected: bool) -> None:
    assert globs.covers(pattern, path) is expected


@pytest.mark.parametrize(("a", "b", "expected"), OVERLAPS)
def test_the_contract_overlaps_symmetrically(a: str, b: str, expected: bool) -> None:
    assert (globs.overlaps(a, b), globs.overlaps(b, a)) == (expected, expected)


@pytest.mark.parametrize(("pattern", "path", "expected"), COVERS)
def test_the_guard_warns(pattern: str, path: str, expected: bool) -> None:
    hold = guard.Hold("bo", pattern, "2999-01-01T00:00:00Z")
    assert bool(guard.conflicts([hold], [path])) is expected


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    """One cached snapshot: claim cc-NNN cites the path of COVERS[NNN]."""
    claims = [testing.claim(f"cc-{i:03d}", f"claim {i}", subject=SUBJECT,
                            evidence_paths=[path]) for i, (_, path, _) in enumerate(COVERS)]
    root = testing.build_cache(tmp_path_factory.mktemp("globs"), "globs", claims=claims,
                               vectors=None)
    return Snapshot(root / "snapshot.sqlite", fleet="globs")


@pytest.mark.parametrize(("i", "case"), list(enumerate(COVERS)))
def test_path_recall_shows_the_claim(snapshot: Snapshot, i: int,
                                     case: tuple[str, str, bool]) -> None:
    pattern, _, expected = case
    shown = {c["id"] for c in snapshot.for_paths([pattern], k=len(COVERS))}
    assert (f"cc-{i:03d}" in shown) is expected


@pytest.mark.parametrize(("pattern", "path"), [(p, q) for p, q, covered in COVERS if covered])
def test_the_rules_block_keeps_every_claim_a_pattern_covers_here(
    tmp_path: Path, pattern: str, path: str
) -> None:
    """The write-rules block keeps a claim when its cited glob's literal part exists in
    the repository: a superset of covering (Cursor's own globs then narrow it), so the one
    thing it must never do is drop a claim whose pattern covers a file that is here."""
    file = tmp_path / globs.normalise(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text("x\n")
    claim = {"id": "cc-1", "evidence_paths": [pattern]}
    assert rules.relevant([claim], tmp_path) == [claim]


def _cite(fleet: Fleet, path: str, *, at: dt.datetime) -> Claim:
    """A promoted claim citing `path` at a commit, stored as proposals store citations
    (moderation.clean_citations); no embedding: nothing here searches."""
    claim = Claim.objects.create(
        fleet=fleet, type="gotcha", scope="fleet", status=Claim.Status.PROMOTED,
        text=f"about {path}", subject=SUBJECT, text_hash=text_hash(f"about {path}"),
        promoted_at=at, created_at=at, independent_sessions=1)
    (citation,) = clean_citations([{"session_id": "s-old", "message_id": "m0", "path": path,
                                    "commit": "abc1234"}])
    Evidence.objects.create(claim=claim, created_at=at, **citation)
    return claim


@pytest.mark.parametrize(("pattern", "path", "expected"), SERVER_COVERS)
def test_staleness_marks_the_claim(fleet_a: Fleet, pattern: str, path: str,
                                   expected: bool) -> None:
    now = timezone.now()
    claim = _cite(fleet_a, path, at=now - dt.timedelta(days=1))
    marked = staleness.mark_changed_paths(fleet_a, [pattern], at=now)
    assert (claim in marked) is expected


@pytest.mark.parametrize(("pattern", "path", "expected"), SERVER_COVERS)
def test_the_briefing_names_the_claim(fleet_a: Fleet, pattern: str, path: str,
                                      expected: bool) -> None:
    now = timezone.now()
    claim = _cite(fleet_a, path, at=now - dt.timedelta(days=1))
    shown = snapshot_render.path_claims(fleet_a, [pattern], now=now)
    assert (claim.public_id in {row["id"] for row in shown}) is expected


@pytest.mark.parametrize(("a", "b", "expected"), SERVER_OVERLAPS)
def test_two_leases_contend(ada: Agent, bo: Agent, a: str, b: str, expected: bool) -> None:
    leases.claim_paths(bo, [b])
    contention = leases.claim_paths(ada, [a]).contention
    assert bool(contention) is expected
    pairs = leases.contended_pairs(ada.fleet_id, now=timezone.now())
    assert bool(pairs) is expected


def test_covering_a_path_is_overlapping_it_on_random_patterns() -> None:
    """covers (a linear matcher, for the hook) and overlaps (segment intersection, for
    the server) are two algorithms for one rule: a lease covering a path overlaps a lease
    on that path. Seeded, so a failure repeats."""
    import random

    rng = random.Random(28)
    alphabet = ["a", "b", ".", "*", "?", "[ab]", "[!a]", "[^.]", "[a-b]"]
    for _ in range(3000):
        pattern = "/".join(
            "**" if rng.random() < 0.15 else "".join(rng.choices(alphabet, k=rng.randint(1, 4)))
            for _ in range(rng.randint(1, 4)))
        path = "/".join("".join(rng.choices("ab.x", k=rng.randint(1, 4)))
                        for _ in range(rng.randint(1, 5)))
        if globs.covers(pattern, path):
            assert globs.overlaps(pattern, path), (pattern, path)


def test_a_hostile_pattern_is_answered_not_backtracked_forever() -> None:
    assert not globs.covers("*a" * 40 + "*b", "a" * 1000)
    assert not globs.covers("/".join(["**"] * 40) + "/b", "/".join(["a"] * 200))
    assert not globs.overlaps("*a" * 12 + "*b", "a*" * 12 + "c")
