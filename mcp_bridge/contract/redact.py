"""The one secret scrubber: scrub_text / scrub_value / find_secrets. Stdlib only.

Write side: everything an agent passes to a write tool goes to the spool, the spool goes
to the store, and nothing after that point can un-leak a secret. The server scrubs again
at ingest with this same module, and its promotion gate refuses what find_secrets finds.

Rules are specific token shapes (prefixes, lengths, structure), not entropy guesses, so
git SHAs, UUIDs and ordinary words survive. It fails closed: a value that cannot be
scrubbed is withheld (WITHHELD), never written as is.
"""

from __future__ import annotations

import re
from typing import Any

WITHHELD = "[REDACTED:unscrubbable]"
MAX_DEPTH = 32


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# (kind, pattern). Order matters: specific prefixes before the generic ones that would
# also match them (Anthropic before OpenAI's "sk-", typed tokens before key=value).
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, flags))
    for kind, pattern, flags in (
        ("private-key", r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END[A-Z0-9 ]*PRIVATE "
         r"KEY-----|.*\Z)", re.S),
        ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", 0),
        ("aws-access-key", r"\b(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[A-Z0-9]{16}\b", 0),
        ("aws-secret-key", r"(?i)(?<=aws_secret_access_key)(?:\"|')?\s*[:=]\s*[\"']?"
         r"[A-Za-z0-9/+]{40}\b", 0),
        ("gcp-api-key", r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])", 0),
        ("gcp-oauth-token", r"\bya29\.[0-9A-Za-z_-]{20,}", 0),
        ("gcp-client-secret", r"\bGOCSPX-[0-9A-Za-z_-]{28}\b", 0),
        ("azure-storage-key", r"(?i)(?<=AccountKey=)[A-Za-z0-9+/]{86}==", 0),
        ("azure-sas-signature", r"(?i)(?<=[?&]sig=)[A-Za-z0-9%+/=]{30,}", 0),
        ("azure-client-secret", r"\b[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![\w~.-])", 0),
        ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})",
         0),
        ("gitlab-token", r"\bgl(?:pat|dt|rt|ptt|cbt|oas|soat)-[A-Za-z0-9_-]{20,}", 0),
        ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b", 0),
        ("pypi-token", r"\bpypi-AgE[A-Za-z0-9_-]{50,}", 0),
        ("anthropic-key", r"\bsk-ant-[A-Za-z0-9]{3,8}\d{2}-[A-Za-z0-9_-]{20,}", 0),
        ("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}(?![A-Za-z0-9_-])", 0),
        ("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}\b", 0),
        ("slack-token", r"\bxox[abposre]-[A-Za-z0-9-]{10,}", 0),
        ("slack-webhook", r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_-]+", 0),
        ("stripe-key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b", 0),
        ("stripe-webhook-secret", r"\bwhsec_[A-Za-z0-9]{24,}\b", 0),
        ("twilio-api-key", r"\bSK[0-9a-f]{32}\b", 0),
        ("sendgrid-key", r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,64}", 0),
        ("mailgun-key", r"\bkey-[0-9a-f]{32}\b", 0),
        ("digitalocean-token", r"\bdo[opr]_v1_[a-f0-9]{64}\b", 0),
        ("shopify-token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", 0),
        ("discord-webhook", r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/"
         r"\d+/[A-Za-z0-9_-]+", 0),
    )
)

# Credentials embedded in a URL: scheme://user:PASSWORD@host
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,20}://[^\s/:@]{1,128}:)([^\s@/]{1,256})(@)")
# Authorization / Proxy-Authorization headers, and a bare "Bearer <token>".
_AUTH_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token|digest|"
    r"negotiate|apikey)?\s*)([^\s\"',;]{6,})")
_BEARER = re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/-]{16,}=*)")
# name=value / name: value where the name ends in a secret-ish word. The value must look
# like a credential (digit, symbol, mixed case or long) so "password: required" survives.
_ASSIGNMENT = re.compile(
    r"(?i)\b([A-Za-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|apikey|"
    r"access[_-]?key|private[_-]?key|client[_-]?secret|credentials?)[\"']?)"
    r"(?![A-Za-z0-9_])(\s*(?::|=|=>|:=)\s*)([\"']?)([^\s\"',;&<>{}()\[\]]{4,})")
_REFERENCE = re.compile(r"^(?:\$|%|\*+$|x+$|\.\.\.|<|\{|null$|none$|true$|false$|\[REDACTED)",
                        re.I)


def _looks_secret(value: str) -> bool:
    if _REFERENCE.match(value):
        return False  # $ENV_VAR, <placeholder>, ****, null: references, not secrets
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    mixed = value.lower() != value and value.upper() != value
    return len(value) >= 16 or (len(value) >= 6 and (has_digit or has_symbol or mixed))


_CONTEXT_RULES = (("url-password", _URL_PASSWORD), ("authorization-header", _AUTH_HEADER),
                  ("bearer-token", _BEARER))


def _keep_context(m: re.Match[str], kind: str) -> str:
    """Keep the scheme/user or header name around the marker; it is the useful part."""
    tail = m.group(3) if m.re is _URL_PASSWORD else ""
    return m.group(1) + marker(kind) + tail


def _sub_assignment(m: re.Match[str], found: list[str] | None) -> str:
    if not _looks_secret(m.group(4)):
        return m.group(0)
    if found is not None:
        found.append("secret-assignment")
    return f"{m.group(1)}{m.group(2)}{m.group(3)}{marker('secret-assignment')}"


# Every rule above needs one of these words or a run of 15+ token characters, so text
# without any is clean and skips the ~30 substitutions (most of what agents write: a claim,
# a reason, a path). tests/mcp_bridge/test_redact.py checks the guard against the rules.
_MAY_HOLD_A_SECRET = re.compile(
    r"(?i)://|authoriz|bearer|pass|secret|token|key|credential|begin|sig=|"
    r"[A-Za-z0-9_\-+/.=~%]{15,}"
)


def _scan(text: str, found: list[str] | None) -> str:
    if not _MAY_HOLD_A_SECRET.search(text):
        return text
    return _full_scan(text, found)


def _full_scan(text: str, found: list[str] | None) -> str:
    for kind, pattern in _RULES:
        text, n = pattern.subn(marker(kind), text)
        if n and found is not None:
            found.append(kind)
    for kind, pattern in _CONTEXT_RULES:
        text, n = pattern.subn(lambda m, kind=kind: _keep_context(m, kind), text)
        if n and found is not None:
            found.append(kind)
    return _ASSIGNMENT.sub(lambda m: _sub_assignment(m, found), text)


def scrub_text(text: str) -> str:
    """Replace every secret in `text` with a typed marker; withhold it if that fails."""
    try:
        return _scan(text, None)
    except Exception:  # fail closed: an unscrubbable value never reaches the spool
        return WITHHELD


def scrub_value(value: Any, _depth: int = 0) -> Any:
    """scrub_text over every string of a JSON value (keys too), at any depth."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, bool | int | float) or value is None:
        return value
    if _depth >= MAX_DEPTH:
        return WITHHELD
    if isinstance(value, dict):
        return {scrub_text(str(k)): scrub_value(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(v, _depth + 1) for v in value]
    return WITHHELD  # not JSON: nothing we can vouch for


def find_secrets(value: Any, _depth: int = 0) -> list[str]:
    """The kinds of secret found anywhere in a JSON value, sorted; [] when clean.

    An unscannable value reports "unscrubbable", so a gate built on this fails closed.
    """
    found: list[str] = []
    try:
        _collect(value, found, _depth)
    except Exception:
        found.append("unscrubbable")
    return sorted(set(found))


def _collect(value: Any, found: list[str], depth: int) -> None:
    if isinstance(value, str):
        _scan(value, found)
    elif isinstance(value, bool | int | float) or value is None:
        return
    elif depth >= MAX_DEPTH:
        found.append("unscrubbable")
    elif isinstance(value, dict):
        for k, v in value.items():
            _collect(str(k), found, depth + 1)
            _collect(v, found, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect(v, found, depth + 1)
    else:
        found.append("unscrubbable")
