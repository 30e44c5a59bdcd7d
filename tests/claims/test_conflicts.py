"""claims.conflicts: which differences make a near neighbour a possible conflict."""

from __future__ import annotations

import pytest

from claims import conflicts

BASE = "Integration tests need NC_R1_MOCK=1 set for Python 3.11 in src/ci.yml with -x."


@pytest.mark.parametrize(
    ("other", "reason"),
    [
        (BASE.replace("need", "do not need"), "negation: not"),
        (BASE.replace("need", "don't need"), "negation: don't"),
        (BASE.replace("NC_R1_MOCK=1", "NC_R1_MOCK=0"), "identifier: NC_R1_MOCK=0"),
        (BASE.replace("NC_R1_MOCK=1", "NC_R2_MOCK=1"), "identifier: NC_R2_MOCK=1"),
        (BASE.replace("3.11", "3.12"), "version: 3.12"),
        (BASE.replace("src/ci.yml", "src/cd.yml"), "path: src/cd.yml"),
        (BASE.replace("-x", "--lf"), "flag: --lf"),
        ("Retries are capped at 3 per job.", None),
        ("Use fetchUserData for the profile page.", None),
    ],
)
def test_differences_that_matter_make_a_conflict(other: str, reason: str | None) -> None:
    if reason is None:  # the two cases below against their own near twins
        twin = other.replace("3", "5") if "3" in other else other.replace("fetchUser", "getUser")
        found = conflicts.compare(other, twin)
    else:
        found = conflicts.compare(BASE, other)
        assert reason in found.reasons
    assert found.relation == conflicts.CONFLICT
    assert found.label == "possible conflict"
    assert any(t.differs for t in found.right)


def test_a_paraphrase_is_a_duplicate_with_its_words_marked() -> None:
    found = conflicts.compare(
        "Integration tests need the mock server running.",
        "Integration tests require the mock server running!",
    )
    assert (found.relation, found.reasons) == (conflicts.DUPLICATE, ())
    assert [t.text for t in found.left if t.differs] == ["need"]
    assert [t.text for t in found.right if t.differs] == ["require"]


@pytest.mark.parametrize(
    ("similarity", "other", "expected"),
    [
        (0.97, "Integration tests require the mock server running.", conflicts.DUPLICATE),
        (0.90, "Integration tests require the mock server running.", None),
        (0.90, "Integration tests do not need the mock server running.", conflicts.CONFLICT),
        (0.80, "Integration tests do not need the mock server running.", None),
    ],
)
def test_the_label_depends_on_similarity_and_tokens(
    similarity: float, other: str, expected: str | None
) -> None:
    base = "Integration tests need the mock server running."
    assert conflicts.relation(base, other, similarity) == expected
