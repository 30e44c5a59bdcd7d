"""The rule table against its own fixtures: every true positive is removed whole, every
false positive survives byte for byte, in plain text, nested JSON and with hidden
characters; the keyword guard never skips text a rule would change."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest

from mcp_bridge.contract import redact
from mcp_bridge.contract.redact_rules import RULES
from tests.mcp_bridge.redact_fixtures import (
    FALSE_POSITIVES,
    JSON_SHAPED_SECRETS,
    JSON_SHAPED_SURVIVORS,
    TRUE_POSITIVES,
    Case,
)


def strings(value: Any) -> Iterator[str]:
    """Every string of a JSON value, keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings(v)


def assert_gone(case: Case, value: Any) -> None:
    """No secret survives, nor either half of a long one (no partial token)."""
    text = "\n".join(strings(value))
    for secret in case.secrets:
        assert secret not in text, (case.kind, case.text, text)
        if len(secret) >= 16:
            rest = case.text.replace(secret, " ")
            for half in (secret[: len(secret) // 2], secret[len(secret) // 2 :]):
                assert half not in text or half in rest, (case.kind, case.text, text)


def test_the_fixture_set_is_as_large_as_the_issue_asks() -> None:
    assert len(TRUE_POSITIVES) >= 150
    assert len(FALSE_POSITIVES) >= 100
    assert len({c.text for c in TRUE_POSITIVES}) == len(TRUE_POSITIVES)
    assert len(set(FALSE_POSITIVES)) == len(FALSE_POSITIVES)


@pytest.mark.parametrize("case", TRUE_POSITIVES, ids=lambda c: c.kind)
def test_each_true_positive_is_removed_whole(case: Case) -> None:
    out = redact.scrub_text(case.text)
    assert_gone(case, out)
    assert redact.marker(case.kind) in out, out
    assert case.kind in redact.find_secrets(case.text)


def test_scrubbing_is_idempotent_and_scrubbed_text_passes_the_gate() -> None:
    """The server scrubs what the bridge scrubbed, and its promotion gate runs find_secrets
    on the result: a marker must never look like a secret itself."""
    for case in TRUE_POSITIVES:
        once = redact.scrub_text(case.text)
        assert redact.scrub_text(once) == once, case.text
        assert redact.find_secrets(once) == [], (case.text, once)


@pytest.mark.parametrize("text", FALSE_POSITIVES)
def test_each_false_positive_survives(text: str) -> None:
    assert redact.scrub_text(text) == text
    assert redact.find_secrets(text) == []


@pytest.mark.parametrize("case", TRUE_POSITIVES, ids=lambda c: c.kind)
def test_true_positives_nested_in_json_evidence(case: Case) -> None:
    value = {"evidence": [{"session_id": "s", "message_id": "m", "excerpt": case.text,
                           "context": {"lines": [case.text], case.text: 1}}]}
    out = redact.scrub_value(value)
    assert_gone(case, out)
    assert redact.marker(case.kind) in json.dumps(out)
    assert case.kind in redact.find_secrets(value)


def test_false_positives_nested_in_json_survive() -> None:
    value = {"evidence": [{"excerpt": t, "more": [t]} for t in FALSE_POSITIVES]}
    assert redact.scrub_value(value) == value
    assert redact.find_secrets(value) == []


@pytest.mark.parametrize(("value", "secret"), JSON_SHAPED_SECRETS)
def test_a_json_member_whose_key_names_a_secret_is_removed(value: dict, secret: str) -> None:
    out = redact.scrub_value(value)
    assert secret not in json.dumps(out)
    assert redact.find_secrets(value)


@pytest.mark.parametrize("value", JSON_SHAPED_SURVIVORS)
def test_json_placeholders_and_non_secrets_survive(value: dict) -> None:
    assert redact.scrub_value(value) == value
    assert redact.find_secrets(value) == []


@pytest.mark.parametrize("hidden", ["\u200b", "\u200d", "\u2060", "\u202e", "\u2066", "\ufeff",
                                    "\u00ad"])
def test_a_secret_split_by_a_hidden_character_is_still_removed_whole(hidden: str) -> None:
    """No partial token survives once the hidden characters are stripped for reading."""
    for case in TRUE_POSITIVES:
        secret = max(case.secrets, key=len)
        if len(secret) < 12 or secret not in case.text:
            continue
        cut = len(secret) // 2
        text = case.text.replace(secret, secret[:cut] + hidden + secret[cut:])
        out = redact.scrub_text(text)
        visible = "".join(ch for ch in out if ch != hidden)
        assert secret[:cut] not in visible and secret[cut:] not in visible, (case.text, out)
        assert secret not in visible


def test_hidden_characters_in_clean_text_are_left_to_the_read_side() -> None:
    text = "refactor\u200b src/app.py \u202e later"
    assert redact.scrub_text(text) == text


def test_every_rule_in_the_table_has_a_true_positive() -> None:
    """Rule by rule: at least one fixture is one that rule alone would catch."""
    texts = [c.text for c in TRUE_POSITIVES]
    silent = [(i, r.id, r.description) for i, r in enumerate(RULES)
              if not any(r.pattern.search(t) for t in texts)]
    assert not silent


def test_no_rule_matches_without_one_of_its_keywords() -> None:
    """The keyword prefilter is sound on every fixture and on random fragments of them."""
    rng = random.Random(14)
    corpus = [c.text for c in TRUE_POSITIVES] + FALSE_POSITIVES
    samples = list(corpus)
    for _ in range(3000):
        piece = rng.choice(corpus)
        start = rng.randrange(len(piece))
        samples.append(piece[start:start + rng.randint(5, 120)])
    for text in samples:
        lower = text.lower()
        for rule in RULES:
            if rule.pattern.search(text):
                assert any(k in lower for k in rule.keywords), (rule.id, text)


def test_the_guarded_scan_agrees_with_the_full_scan_on_fixture_fragments() -> None:
    rng = random.Random(3)
    pieces = [c.text for c in TRUE_POSITIVES] + FALSE_POSITIVES + [" ", "=", ":", "\n"]
    skipped = 0
    for _ in range(4000):
        parts = []
        for _ in range(rng.randint(1, 3)):
            piece = rng.choice(pieces)
            start = rng.randrange(len(piece))
            parts.append(piece[start:start + rng.randint(1, 60)])
        text = rng.choice(["", " ", "\n"]).join(parts)
        assert redact.scrub_text(text) == redact._full_scan(text, None), text
        skipped += not redact._MAY_HOLD_A_SECRET.search(text)
    assert 200 < skipped < 3800


def test_rules_are_data_with_the_fields_the_issue_names() -> None:
    contexts = {"token", "label", "pair", "block", "assignment"}
    for rule in RULES:
        assert rule.id and rule.description and rule.keywords, rule
        assert rule.context in contexts, rule
        assert all(k == k.lower() for k in rule.keywords), rule
    assert redact.rule_count() >= 130
