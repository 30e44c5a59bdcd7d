from __future__ import annotations

import itertools
import random

import pytest

from fleet.globs import BadPath, normalise
from tests.mcp_bridge.glob_cases import OVERLAPS


@pytest.mark.parametrize(
    ("path", "clean"),
    [("./src//a.py", "src/a.py"), ("src/./a.py", "src/a.py"), ("src\\win\\a.py", "src/win/a.py")],
)
def test_it_normalises_paths(path: str, clean: str) -> None:
    assert normalise(path) == clean


@pytest.mark.parametrize(
    "hostile", ["", "   ", "/etc/passwd", "../outside", "src/../../x", "a\x00b", "x" * 2000, "."]
)
def test_it_refuses_paths_that_name_nothing_in_a_repo(hostile: str) -> None:
    with pytest.raises(BadPath):
        normalise(hostile)


@pytest.mark.parametrize(("a", "b"), [(a, b) for a, b, overlap in OVERLAPS if overlap])
def test_the_literal_prefix_filter_never_hides_an_overlap(a: str, b: str) -> None:
    from fleet.globs import literal_prefix, prefixes_of

    pa, pb = literal_prefix(a), literal_prefix(b)
    assert pb.startswith(pa) or pb in prefixes_of(pa)


#: Characters that stress a prefix range: SQL's LIKE wildcards and escape, the slash and
#: its neighbours in code-point order, multi-byte ones, the last one before the surrogates,
#: the first after them and the highest code point.
_STRESS = ["/", ".", "0", "a", "b", "_", "%", "\\", "ü", "\ud7ff", "\ue000", "\uffff",
           "\U0010ffff"]


def _strings(rng: random.Random, n: int, longest: int) -> list[str]:
    return ["".join(rng.choice(_STRESS) for _ in range(rng.randint(0, longest)))
            for _ in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_start_ranges_hold_exactly_the_strings_that_start_with_a_prefix(seed: int) -> None:
    from fleet.globs import start_ranges

    rng = random.Random(seed)
    prefixes = {p for p in _strings(rng, rng.randint(1, 6), 3) if p}
    ranges = start_ranges(prefixes)
    if any(p.strip("\U0010ffff") == "" for p in prefixes):  # no string is above them all
        assert ranges is None
        return
    assert ranges is not None
    bounds = list(zip(ranges.lows, ranges.highs, strict=True))
    assert all(high <= low for (_, high), (low, _) in itertools.pairwise(bounds))  # disjoint
    for probe in _strings(rng, 400, 5) + sorted(prefixes):
        expected = any(probe.startswith(p) for p in prefixes)
        assert any(low <= probe < high for low, high in bounds) == expected, (probe, prefixes)


def test_a_prefix_every_string_starts_with_has_no_range() -> None:
    from fleet.globs import start_ranges

    assert start_ranges({"", "src/"}) is None
    assert start_ranges(set()) == ([], [])
    assert start_ranges({"src/", "src/a/", "docs/"}) == (["docs/", "src/"], ["docs0", "src0"])


@pytest.mark.django_db
def test_postgres_orders_a_prefix_range_as_python_does() -> None:
    """The ranges are built in Python's code-point order and read with a text_pattern_ops
    index's operators (~>=~, ~<~), which compare UTF-8 bytes: the two must agree."""
    from django.db import connection

    from fleet.globs import start_ranges

    rng = random.Random(7)
    prefixes = sorted({p for p in _strings(rng, 60, 3) if p.strip("\U0010ffff")})
    probes = _strings(rng, 300, 5) + prefixes
    for prefix in prefixes:
        ranges = start_ranges({prefix})
        assert ranges is not None
        with connection.cursor() as cur:
            cur.execute("SELECT s FROM unnest(%s::text[]) AS s "
                        "WHERE s ~>=~ %s AND s ~<~ %s", [probes, ranges.lows[0], ranges.highs[0]])
            found = sorted(s for (s,) in cur.fetchall())
        assert found == sorted(p for p in probes if p.startswith(prefix)), prefix


def test_the_prefix_index_finds_exactly_the_prefixes_that_may_overlap() -> None:
    import random

    from fleet.globs import PrefixIndex

    rng = random.Random(3)
    words = ["", "a/", "a/b/", "a/bc/", "ab/", "a/b/c/", "b/", "a/b/c/d/", "z/"]
    index: PrefixIndex[int] = PrefixIndex()
    filed = []
    for i in range(200):
        prefix = rng.choice(words)
        index.add(prefix, i)
        filed.append((prefix, i))
    for probe in words:
        expected = {i for p, i in filed if p.startswith(probe) or probe.startswith(p)}
        found = list(index.near(probe))
        assert sorted(found) == sorted(expected), probe
