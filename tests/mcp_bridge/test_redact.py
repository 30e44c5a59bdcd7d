from __future__ import annotations

import json

import pytest

from mcp_bridge.contract import redact

SECRETS = [
    ("AKIAIOSFODNN7EXAMPLE", "aws-access-key"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws-secret-key"),
    ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "gcp-api-key"),
    ("ya29.a0AfH6SMBx1234567890abcdefghij", "gcp-oauth-token"),
    ("DefaultEndpointsProtocol=https;AccountName=x;AccountKey=" + "A" * 86 + "==",
     "azure-storage-key"),
    ("ghp_" + "a1B2" * 9, "github-token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "github-token"),
    ("glpat-abcdefghij0123456789", "gitlab-token"),
    ("npm_" + "a" * 36, "npm-token"),
    ("pypi-AgEIcHlwaS5vcmc" + "Ab3x" * 15, "pypi-token"),
    ("sk-proj-" + "Ab1" * 15, "openai-key"),
    ("sk-ant-api03-" + "Zz9_" * 10, "anthropic-key"),
    ("hf_" + "a" * 34, "huggingface-token"),
    ("xoxb-123456789012-abcdefghijkl", "slack-token"),
    ("https://hooks.slack.com/services/T000/B000/Xk93Jd8sLq0pZ", "slack-webhook"),
    ("sk_live_" + "a" * 24, "stripe-key"),
    ("SK" + "0123456789abcdef" * 2, "twilio-api-key"),
    ("SG." + "a" * 22 + "." + "b" * 43, "sendgrid-key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r\n-----END OPENSSH PRIVATE KEY-----",
     "private-key"),
    ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg (cut off", "private-key"),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0",
     "jwt"),
    ("postgres://app:s3cr3t-pw@db.internal:5432/app", "url-password"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "authorization-header"),
    ("curl -H 'authorization: Bearer abcdef1234567890abcdef'", "authorization-header"),
    ("use bearer abcdefghijklmnop12345678 for it", "bearer-token"),
    ("DB_PASSWORD=hunter2!", "secret-assignment"),
    ('"client_secret": "Xy7-ab3Kq9"', "secret-assignment"),
    ("api_key: 0123456789abcdef0123", "secret-assignment"),
]

SURVIVORS = [
    "commit 3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39 fixed it",
    "request id 123e4567-e89b-12d3-a456-426614174000",
    "the password field is required",
    "password: required",
    "token: null",
    "GITHUB_TOKEN=$GITHUB_TOKEN in CI",
    "set max_tokens=4096 and token_count=12",
    "the author=ada wrote it",
    "sk-learn is a library; skip-ahead",
    "https://example.com/path?page=2",
    "git@github.com:org/repo.git",
    "AKIA is the prefix of AWS access keys",
    "Bearer tokens expire",
    "sha256:07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
    "ordinary words, numbers 12345 and paths src/app.py survive",
]


@pytest.mark.parametrize(("text", "kind"), SECRETS)
def test_it_replaces_each_secret_with_a_typed_marker(text: str, kind: str) -> None:
    scrubbed = redact.scrub_text(f"before {text} after")
    assert f"[REDACTED:{kind}]" in scrubbed
    assert kind in redact.find_secrets(text)
    assert scrubbed.startswith("before ")


@pytest.mark.parametrize("text", SURVIVORS)
def test_it_leaves_ordinary_text_alone(text: str) -> None:
    assert redact.scrub_text(text) == text
    assert redact.find_secrets(text) == []


def test_it_scrubs_every_string_at_any_depth_keys_included() -> None:
    value = {"evidence": [{"excerpt": {"deep": ["x", "AKIAIOSFODNN7EXAMPLE"]}}],
             "AKIAIOSFODNN7EXAMPLE": 1, "n": 3, "ok": True, "none": None}
    out = redact.scrub_value(value)
    assert out["evidence"][0]["excerpt"]["deep"][1] == "[REDACTED:aws-access-key]"
    assert "[REDACTED:aws-access-key]" in out and out["n"] == 3 and out["ok"] is True
    assert redact.find_secrets(value) == ["aws-access-key"]


def test_it_fails_closed_when_scrubbing_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(text: str, found: object) -> str:
        raise RuntimeError("regex engine exploded")

    monkeypatch.setattr(redact, "_scan", boom)
    assert redact.scrub_text("AKIAIOSFODNN7EXAMPLE") == redact.WITHHELD
    assert redact.scrub_value({"a": ["x"]}) == {redact.WITHHELD: [redact.WITHHELD]}
    assert redact.find_secrets("anything") == ["unscrubbable"]


def test_it_withholds_values_that_are_not_json() -> None:
    assert redact.scrub_value(object()) == redact.WITHHELD
    deep: list = []
    node = deep
    for _ in range(redact.MAX_DEPTH + 5):  # deeper than any front door takes (was 40 > 32)
        node.append([])
        node = node[0]
    assert redact.WITHHELD in str(redact.scrub_value(deep))


def test_the_clean_text_guard_never_skips_what_the_rules_would_change() -> None:
    """Text the guard calls clean must be text every rule leaves as it is: fragments of
    every secret above, cut at random and mixed with ordinary words, agree both ways."""
    import random

    rng = random.Random(7)
    pieces = [text for text, _ in SECRETS] + SURVIVORS + ["a", "x1", "://", " ", "=", ":"]
    skipped = 0
    for _ in range(5000):
        parts = []
        for _ in range(rng.randint(1, 4)):
            piece = rng.choice(pieces)
            start = rng.randrange(len(piece))
            parts.append(piece[start : start + rng.randint(1, 40)])
        text = rng.choice(["", " "]).join(parts)
        assert redact.scrub_text(text) == redact._full_scan(text, None), text
        skipped += not redact._MAY_HOLD_A_SECRET.search(text)
    assert 500 < skipped < 4500  # both branches are exercised


def test_each_rule_needs_what_the_guard_looks_for() -> None:
    for text, _ in SECRETS:
        assert redact._MAY_HOLD_A_SECRET.search(text), text


def test_caller_shaped_json_is_scrubbed_to_the_depth_every_front_door_accepts() -> None:
    """100 levels are ordinary in caller-shaped evidence; past what any front door parses
    (events.MAX_JSON_DEPTH) the value is withheld, never recursed into."""
    from mcp_bridge.contract.events import MAX_JSON_DEPTH

    def nested(levels: int, leaf: object) -> object:
        value = leaf
        for _ in range(levels):
            value = {"a": value}
        return value

    token = "ghp_" + "a1B2" * 9
    deep = json.dumps(redact.scrub_value(nested(MAX_JSON_DEPTH - 1, {"note": f"tok {token}"})))
    assert token not in deep and redact.WITHHELD not in deep and deep.count("{") == MAX_JSON_DEPTH
    too_deep = json.dumps(redact.scrub_value(nested(MAX_JSON_DEPTH + 1, "x")))
    assert redact.WITHHELD in too_deep
