from __future__ import annotations

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


def test_like_patterns_escape_the_wildcards_of_sql() -> None:
    from fleet.globs import like_pattern

    assert like_pattern("src/my_mod%/") == "src/my\\_mod\\%/%"
    assert like_pattern("a\\b") == "a\\\\b%"


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
