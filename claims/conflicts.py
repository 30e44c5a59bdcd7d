"""Is a near neighbour a duplicate, or a possible conflict? Token-level, explainable.

Two claims a cosine apart of 0.97 may say the same thing ("needs X" / "requires X") or
opposite things ("needs NC_R1_MOCK=1" / "does not need NC_R1_MOCK=1", "NC_R1_MOCK" /
"NC_R2_MOCK", "3.11" / "3.12"). Embeddings cannot tell those apart; the differing tokens
can. A difference in negation, or in a token that is a number, version, flag, path or
identifier, makes the pair a *possible conflict*; any other difference leaves it a
*likely duplicate*. Nothing here decides anything: the moderator is shown the label, the
reasons and both texts with the differing tokens marked.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from difflib import SequenceMatcher

DUPLICATE_SIMILARITY = 0.95  # at or above, with no conflicting token: likely duplicate
CONFLICT_SIMILARITY = 0.85  # at or above, with a conflicting token: possible conflict

DUPLICATE, CONFLICT = "duplicate", "conflict"

NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "none",
        "nothing",
        "nobody",
        "neither",
        "nor",
        "without",
        "cannot",
        "can't",
        "don't",
        "doesn't",
        "didn't",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "won't",
        "wouldn't",
        "shouldn't",
        "mustn't",
        "needn't",
        "haven't",
        "hasn't",
        "hadn't",
        "avoid",
        "disable",
        "disabled",
        "unset",
    ]
)
_WORD = re.compile(r"\S+")
_EDGE = "\"'`()[]{}<>,;:!?*"  # stripped before comparing; "." only at the very end
_VERSION = re.compile(r"^v?\d+(\.\d+)*[a-z0-9.+-]*$")


@dataclass(frozen=True)
class Token:
    text: str  # as written
    key: str  # as compared
    differs: bool = False


@dataclass(frozen=True)
class Comparison:
    relation: str  # DUPLICATE or CONFLICT
    reasons: tuple[str, ...]  # e.g. ("negation: not", "identifier: NC_R1_MOCK → NC_R2_MOCK")
    left: tuple[Token, ...]
    right: tuple[Token, ...]

    @property
    def label(self) -> str:
        return "possible conflict" if self.relation == CONFLICT else "likely duplicate"


def _key(word: str) -> str:
    word = unicodedata.normalize("NFKC", word).casefold().strip(_EDGE)
    return word[:-1] if word.endswith(".") else word


def tokens(text: str) -> list[Token]:
    return [Token(m.group(), _key(m.group())) for m in _WORD.finditer(text)]


def kind_of(key: str) -> str | None:
    """Why a differing token matters, or None for an ordinary word."""
    if key in NEGATIONS or key.endswith("n't"):
        return "negation"
    if _VERSION.match(key) or re.search(r"\d", key) and re.search(r"[.]\d", key):
        return "version" if "." in key else "number"
    if re.search(r"\d", key):
        return "number" if key.replace(",", "").isdigit() else "identifier"
    if key.startswith("-") and len(key) > 1:
        return "flag"
    if "=" in key:
        return "flag"
    if "/" in key or re.search(r"\w\.\w{1,5}$", key):
        return "path"
    if "_" in key or re.search(r"[a-z][A-Z]", key):
        return "identifier"
    return None


def _raw_kind(word: str) -> str | None:
    """Case-sensitive checks the casefolded key has lost (camelCase, ALL_CAPS)."""
    stripped = word.strip(_EDGE).rstrip(".")
    if re.search(r"[a-z][A-Z]", stripped) or (len(stripped) > 1 and stripped.isupper()):
        return "identifier"
    return None


def compare(left_text: str, right_text: str) -> Comparison:
    """Mark the tokens that differ and say whether any of them makes this a conflict."""
    left, right = tokens(left_text), tokens(right_text)
    matcher = SequenceMatcher(a=[t.key for t in left], b=[t.key for t in right], autojunk=False)
    left_diff: set[int] = set()
    right_diff: set[int] = set()
    reasons: list[str] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        left_diff.update(range(i1, i2))
        right_diff.update(range(j1, j2))
        for side in (left[i1:i2], right[j1:j2]):
            for t in side:
                kind = kind_of(t.key) or _raw_kind(t.text)
                if kind:
                    reason = f"{kind}: {t.text.strip(_EDGE).rstrip('.')}"
                    if reason not in reasons:
                        reasons.append(reason)
    return Comparison(
        relation=CONFLICT if reasons else DUPLICATE,
        reasons=tuple(reasons),
        left=tuple(Token(t.text, t.key, i in left_diff) for i, t in enumerate(left)),
        right=tuple(Token(t.text, t.key, j in right_diff) for j, t in enumerate(right)),
    )


def relation(left_text: str, right_text: str, similarity: float) -> str | None:
    """DUPLICATE, CONFLICT or None (not close enough to label) for a neighbour pair."""
    if similarity < CONFLICT_SIMILARITY:
        return None
    found = compare(left_text, right_text)
    if found.relation == CONFLICT:
        return CONFLICT
    return DUPLICATE if similarity >= DUPLICATE_SIMILARITY else None
