"""The one secret scrubber: scrub_text / scrub_value / find_secrets. Stdlib only.

Write side: everything an agent passes to a write tool goes to the spool, the spool goes
to the store, and nothing after that point can un-leak a secret. The server scrubs again
at ingest with this same module, its promotion gate refuses what find_secrets finds, the
drain scrubs dead letters with scrub_text, and the web server's logs go through it too
(ctxlake_site/logs.py).

The rules are data (redact_rules.RULES, gitleaks-style: id, pattern, keywords, entropy
floor, the context each needs); this module is the engine that runs them:

1. Hidden characters (zero-width, bidi, tags) are taken out of a copy of the text before
   scanning, and every match is mapped back onto the original, so a secret split by an
   invisible character is removed whole, invisible characters included.
2. A clean-text guard: text with no run of 15+ token characters and no keyword that a
   short-secret rule needs skips the table (most of what agents write).
3. Every rule whose keywords appear reports spans; overlapping spans merge and the
   earliest rule in the table names the marker.
4. `name = value` assignments (env, shell, YAML, TOML, JSON, INI, XML, code, CLI flags)
   whose name names a secret, where the value is not a placeholder or a reference
   (`$VAR`, `${VAR}`, `<…>`, `os.environ[...]`, `process.env.X`, `get_secret(...)`,
   `changeme`, `xxxx`, `***`, an ordinary word, a file path).

It fails closed: a value that cannot be scrubbed is withheld (WITHHELD), never written.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from mcp_bridge.contract import spans
from mcp_bridge.contract.events import MAX_JSON_DEPTH
from mcp_bridge.contract.redact_rules import (
    NAME_KEYWORDS,
    RULES,
    STRONG_NAME,
    WEAK_NAME,
    LazyPattern,
    Rule,
)

WITHHELD = "[REDACTED:unscrubbable]"
#: Deeper than every front door accepts JSON: withheld (fail closed), never recursed into.
MAX_DEPTH = MAX_JSON_DEPTH
ASSIGNMENT = "secret-assignment"


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


def rule_count() -> int:
    """Rules in the table plus the assignment rules below (what docs and the bench report)."""
    return len(RULES) + len(_ASSIGNMENT_FORMS)


# --- hidden characters -------------------------------------------------------------------
_HIDDEN = LazyPattern(spans.invisible_class())


# --- value checks: placeholders, references, ordinary words --------------------------------
_WORD_LIST = """
required optional none null nil true false empty blank string str text int integer bool
boolean number bytes secret secrets password passwords passwd pass token tokens key keys
value values default defaults example examples sample placeholder redacted hidden masked
changeme changeit unset undefined todo tbd fixme n/a na tba env environment variable var
here your yours test testing dummy fake foo bar baz qux any stored missing invalid expired
valid set present absent yes no on off enabled disabled auto manual generated random
rotated revoked omitted elided removed same new old current mine ours secure insecure
unknown anonymous guest user username admin root login apikey api_key access_token
auth_token bearer basic oauth oauth2 jwt sha256 md5 hash hashed encrypted plaintext
vault keychain keyring keyvault ssm envvar dotenv ask prompt stdin file path
"""
_WORDS = frozenset(_WORD_LIST.split())
# A whole value that stands for a secret held elsewhere.
_REFERENCE = LazyPattern(
    r"""(?x)
    \$[A-Za-z_][\w]*                       # $VAR
    | \$\{[^}\n]*\}                          # ${VAR} ${VAR:-x}
    | \$\{\{[^}\n]*\}\}                      # ${{ secrets.X }}
    | \$\([^)\n]*\)?                         # $(cat file)
    | %\(?[\w.]+\)?s?%?                      # %(password)s  %PASSWORD%
    | \{\{[^}\n]*\}\}?                       # {{ vault_password }}
    | \{[\w.\[\]'"-]*\}                       # {token}  (f-strings, templates)
    | <[^<>\n]*>?                            # <your-token-here>
    | \[REDACTED[^\]]*\]?                    # already scrubbed
    | \#\{[^}\n]*\}                          # #{ruby}
    | ![A-Za-z]\w*\b.*                        # YAML tags: !vault, !Ref
    | @Microsoft\.KeyVault\(.*                # Azure app-setting reference
    | (?:env|secret|vault|ssm|op|awssm|gcpsm|azkv|k8s|doppler|infisical):[\w./:-]*  # scheme refs
    """)
_MASKED = LazyPattern(r"^(?:[xX*•#.·_-]{3,}|.*(?:xxxx|XXXX|\*\*\*|\.\.\.|…|•••).*)$")
_PLACEHOLDER_WORDS = LazyPattern(
    r"(?i)^(?:your|my|insert|replace|enter|put|add|paste|fill|change|set)[\s_-]|"
    r"(?:here|placeholder|example|sample|dummy|changeme|redacted|goes[_-]here)$|"
    r"^(?:example|sample|dummy|fake|test|placeholder)[_-]")
# An unquoted value that is code: a dotted/attribute path, a call or a subscript, a
# constant or variable name.
_CODE_REF = LazyPattern(
    r"^(?:[A-Za-z_$][\w$]*(?:(?:\.|::|->|\?\.)[A-Za-z_$][\w$]*)+[(\[]?.*"
    r"|[A-Za-z_$][\w$.]*[(\[].*"
    r"|[A-Za-z_]*_[A-Za-z_]*|[A-Z]{2,})$")
_PATH = LazyPattern(r"^(?:/|\./|\.\./|~/|[A-Za-z]:\\)[^\s]*$")
_UUID = LazyPattern(r"^[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")
_HEXHASH = LazyPattern(r"^(?:[0-9a-f]{32}|[0-9a-f]{40}|[0-9a-f]{64}|[0-9a-f]{128})$", re.I)
_PROSE = LazyPattern(r"^[A-Za-z][A-Za-z,.'’-]*(?: [A-Za-z,.'’-]+){2,}$")


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def is_placeholder(value: str, *, quoted: bool = False) -> bool:
    """True for a value that stands in for a secret rather than being one."""
    v = value.strip()
    if not v or "[REDACTED" in v:  # empty, or already scrubbed (scrubbing is idempotent)
        return True
    if _REFERENCE.fullmatch(v) or _MASKED.match(v) or _PLACEHOLDER_WORDS.search(v):
        return True
    bare = v.strip("\"'`.,;:!?()[]{}").lower()
    if bare in _WORDS or not bare:
        return True
    if _PATH.match(v) and not v.startswith("//"):
        return True
    if not quoted and _CODE_REF.match(v):
        return True
    return quoted and bool(_PROSE.match(v))


def looks_secret(value: str) -> bool:
    """A credential-shaped value: long, or mixing digits, symbols or cases; not a word."""
    if len(value) < 6:
        return False
    if re.fullmatch(r"[a-z._-]+|[A-Z][a-z]+|[A-Z]+", value):
        return False  # a word, a slug, a Capitalised word, an acronym
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    mixed = value.lower() != value and value.upper() != value
    return has_digit or has_symbol or mixed


def looks_random(value: str) -> bool:
    """High-entropy token for a WEAK name (`*_key`): base64/base62-like, not a hash."""
    if len(value) < 16 or _UUID.match(value) or _HEXHASH.match(value):
        return False
    classes = sum((any(c.islower() for c in value), any(c.isupper() for c in value),
                   any(c.isdigit() for c in value)))
    return classes >= 3 and entropy(value) >= 3.5


# --- assignments -------------------------------------------------------------------------
_NAME = rf"[A-Za-z0-9_.$@-]*?(?:(?P<strong>{STRONG_NAME})|(?P<weak>{WEAK_NAME}))"
_VALUE = (r"(?:(?P<q>\\?[\"'`])(?P<qv>[^\n]{0,300}?)(?P=q)"
          r"|(?P<v>(?:[^\s\"'`,;<>|&]|&(?![A-Za-z_][\w.-]*=)){1,300}))")
# Each form is matched anchored at the start of a name (a run of name characters holding a
# secret-naming word), so the cost is per candidate name, not per character of text.
_OP = r"(?:[ \t]*(?::=|=>|\?=|\|\|=|=|:(?!//))[ \t]*|[ \t]+is[ \t]+)[ \t]*"
_NAME_END = r"(?![A-Za-z0-9_])"
_ASSIGNMENT_FORMS: tuple[LazyPattern, ...] = (
    # NAME = value, NAME: value, "NAME": "value", NAME := value, NAME => value, NAME is value
    LazyPattern(rf"(?i)(?:--?)?{_NAME}{_NAME_END}(?:\\?[\"'`])?\]?{_OP}{_VALUE}"),
    # --password value, --token value (CLI flags with a space)
    LazyPattern(rf"(?i)--?{_NAME}(?![A-Za-z0-9_-])[ \t]+(?!-){_VALUE}"),
    # set -x TOKEN value (fish), ENV PASSWORD value (Dockerfile), setenv (csh): see _ENV_VERB
    LazyPattern(rf"(?i){_NAME}{_NAME_END}[ \t]+{_VALUE}"),
    # <password>value</password>
    LazyPattern(rf"(?i)<(?P<tag>{_NAME})>(?P<v>[^<\n]{{1,300}})</(?P=tag)>"),
    # <add key="ApiKey" value="..."/> (NuGet, .NET config)
    LazyPattern(rf"(?i)<add\s+key=\"{_NAME}\"\s+value=\"(?P<qv>[^\"\n]{{1,300}})\""),
)
_ENV_VERB = LazyPattern(r"(?i)(?:^|[^\w-])(?:set[ \t]+-[a-zA-Z]+|env|setenv)[ \t]+$")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.$@-")
_NAME_RUN = LazyPattern(r"[A-Za-z0-9_.$@-]+")
_SECRET_KEY = LazyPattern(rf"(?i)[A-Za-z0-9_.$@ -]*?(?:{STRONG_NAME})")


def _trim(value: str) -> str:
    """Drop closing brackets and sentence punctuation the unquoted value swallowed."""
    while value and value[-1] in ")]}" and value.count(value[-1]) > value.count(
            {")": "(", "]": "[", "}": "{"}[value[-1]]):
        value = value[:-1]
    return value.rstrip(".:") if len(value) > 1 else value


def _assignment_value(m: re.Match[str]) -> tuple[int, int] | None:
    """The span of a secret value in an assignment match, or None if it is not one."""
    quoted = m.groupdict().get("qv") is not None
    group = "qv" if quoted else "v"
    value = m.group(group)
    start = m.start(group)
    if not quoted:
        value = _trim(value)
    if is_placeholder(value, quoted=quoted):
        return None
    if m.group("strong") is not None:
        ok = (len(value) >= 4 and not value.isdigit()) if quoted else looks_secret(value)
    else:
        ok = looks_random(value)
    return (start, start + len(value)) if ok else None


# A token-shaped match that is a template: ghp_xxxxxxxx…, sk-****, sk-...
_MASKED_TOKEN = LazyPattern(r"(?i)x{8,}|0{12,}|\*{3,}|\.{3}|…|your[_-]?(?:api|token|key|secret)|"
                           r"placeholder|redacted")


def _name_starts(text: str, lower: str, gated: bool) -> list[int]:
    """Where a candidate name begins: the start of the run of name characters around each
    secret-naming word (gated), or every run of name characters (the full scan)."""
    if not gated:
        return [m.start() for m in _NAME_RUN.finditer(text)]
    starts: set[int] = set()
    for word in NAME_KEYWORDS:
        i = lower.find(word)
        while i != -1:
            j = i
            while j and text[j - 1] in _NAME_CHARS:
                j -= 1
            starts.add(j)
            i = lower.find(word, i + len(word))
    return sorted(starts)


def _assignment_matches(text: str, lower: str, gated: bool) -> Iterator[re.Match[str]]:
    plain, cli, env, xml, add = _ASSIGNMENT_FORMS
    for j in _name_starts(text, lower, gated):
        if j and text[j - 1] in _NAME_CHARS:
            continue  # not the start of a name
        for m in (plain.match(text, j), cli.match(text, j)):
            if m:
                yield m
        if _ENV_VERB.search(text, max(0, j - 24), j):
            m = env.match(text, j)
            if m:
                yield m
        if j and text[j - 1] == "<":
            m = xml.match(text, j - 1)
            if m:
                yield m
        if text.endswith('key="', 0, j):
            at = text.rfind("<add", max(0, j - 40), j)
            m = add.match(text, at) if at != -1 else None
            if m:
                yield m


def _value_ok(rule: Rule, value: str) -> bool:
    if rule.context != "block" and _MASKED_TOKEN.search(value):
        return False
    if rule.entropy and entropy(value) < rule.entropy:
        return False
    if rule.context == "assignment":
        v = value.strip("\"'")
        # In a URL's user:password@ or a login command's password slot a value is a
        # password whatever it looks like: `pa.ss.word` there is no attribute reference.
        in_slot = rule.id in _PASSWORD_SLOTS
        return not is_placeholder(v, quoted=in_slot or value[:1] in "\"'") and (
            in_slot and len(v) >= 1 or looks_secret(v))
    return True


_PASSWORD_SLOTS = frozenset(("url-password", "netrc-password", "cli-password", "curl-user"))


# --- the clean-text guard ----------------------------------------------------------------
# Every token, label and pair rule removes a run of 15+ token characters (Rule.needs_run);
# every other rule, and every assignment, needs one of these words. Text with neither is
# clean and skips the whole table. tests/mcp_bridge/test_redact_rules.py checks both halves
# against the fixtures and random fragments of them.
_RUN = LazyPattern(r"[A-Za-z0-9_\-+/.=~%:]{15,}")
_GUARD_WORDS = tuple(sorted({*NAME_KEYWORDS,
                             *(k for r in RULES if not r.needs_run for k in r.keywords)}))
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _trie(words: list[str]) -> str:
    """One regex matching the longest keyword at a position, built as a trie so that each
    position costs a character comparison or two instead of one per keyword."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        alts = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(root)


_KEYWORDS = sorted({k for r in RULES for k in r.keywords} | set(NAME_KEYWORDS))
_KEYWORD_AT = LazyPattern("(?=(" + _trie(_KEYWORDS) + "))")


@functools.cache
def _also(hit: str) -> tuple[str, ...]:
    """A keyword found at a position also stands for every shorter keyword it starts with."""
    return tuple(p for p in _KEYWORDS if hit.startswith(p))

_RULES_BY_KEYWORD: dict[str, list[int]] = {}
for _i, _rule in enumerate(RULES):
    for _k in _rule.keywords:
        _RULES_BY_KEYWORD.setdefault(_k, []).append(_i)


def _present(lower: str) -> set[str]:
    """Every keyword of the table (and every secret-naming word) that occurs in `lower`."""
    if len(lower) <= 512:  # short text: substring tests beat compiling the trie (hooks)
        return {k for k in _KEYWORDS if k in lower}
    found: set[str] = set()
    for hit in {m.group(1) for m in _KEYWORD_AT.finditer(lower)}:
        found.update(_also(hit))
    return found


class _Guard:
    """`search(text)`: may this text hold a secret? (substring tests beat one big regex)"""

    @staticmethod
    def search(text: str) -> bool:
        return _RUN.search(text) is not None or any(w in text.lower() for w in _GUARD_WORDS)


_MAY_HOLD_A_SECRET = _Guard()

_SECRET_GROUPS = ("s", "s2", "s3")


def _keywords(text: str, lower: str) -> set[str] | None:
    """The keywords the gated scan acts on; None when the guard calls the text clean."""
    if _RUN.search(text) is not None:
        return _present(lower)
    # No run of 15 token characters: only rules that do not need one can match.
    present = {w for w in _GUARD_WORDS if w in lower}
    return present or None


def _spans(text: str, lower: str, present: set[str] | None,
           ) -> Iterator[tuple[int, int, int, str]]:
    """(start, end, rule order, kind) of every secret. `present`: the keywords found (the
    gated scan runs only their rules), or None for the full scan (every rule)."""
    gated = present is not None
    if present is None:
        present, active = set(NAME_KEYWORDS), list(range(len(RULES)))
    else:
        active = sorted({i for k in present for i in _RULES_BY_KEYWORD.get(k, ())})
    for order in active:
        rule = RULES[order]
        named = [g for g in _SECRET_GROUPS if g in rule.pattern.groupindex]
        for m in rule.pattern.finditer(text):
            if rule.boundary and m.start() and text[m.start() - 1] in _TOKEN_CHARS:
                continue
            groups: list[str | int] = [g for g in named if m.group(g) is not None] or [0]
            if not all(_value_ok(rule, m.group(g)) for g in groups):
                continue
            for g in groups:
                yield m.start(g), m.end(g), order, rule.id
    if not present.intersection(NAME_KEYWORDS):
        return
    for m in _assignment_matches(text, lower, gated):
        span = _assignment_value(m)
        if span:
            yield span[0], span[1], len(RULES), ASSIGNMENT


def _replace(text: str, spans: list[tuple[int, int, str]]) -> str:
    parts, at = [], 0
    for start, end, kind in spans:
        parts += [text[at:start], marker(kind)]
        at = end
    parts.append(text[at:])
    return "".join(parts)


def _redact(text: str, found: list[str] | None, gated: bool) -> str:
    visible, index = (text, None) if text.isascii() else spans.visible(text, _HIDDEN)
    lower = visible.lower()
    present = _keywords(visible, lower) if gated else None
    if gated and present is None:
        return text
    merged = spans.merge(_spans(visible, lower, present))
    if not merged:
        return text
    # back onto the original: hidden characters inside go too
    merged = [(*spans.original(index, len(text), s, e), k) for s, e, k in merged]
    if found is not None:
        found.extend(k for _, _, k in merged)
    return _replace(text, merged)


@functools.lru_cache(maxsize=256)
def _scan_once(text: str) -> tuple[str, tuple[str, ...]]:
    """The scrubbed text and the kinds found. Cached: a write tool asks find_secrets and
    then scrub_value about the same strings, and the drain scrubs what the API scrubbed."""
    found: list[str] = []
    return _redact(text, found, gated=True), tuple(found)


def _scan(text: str, found: list[str] | None) -> str:
    out, kinds = _scan_once(text)
    if found is not None:
        found.extend(kinds)
    return out


def _full_scan(text: str, found: list[str] | None) -> str:
    """Every rule, no guard and no keyword gating: what the guarded scan must agree with."""
    return _redact(text, found, gated=False)


def scrub_text(text: str) -> str:
    """Replace every secret in `text` with a typed marker; withhold it if that fails."""
    try:
        return _scan(text, None)
    except Exception:  # fail closed: an unscrubbable value never reaches the spool
        return WITHHELD


def _secret_named(key: Any, value: Any) -> bool:
    """A JSON member whose key names a secret and whose string value is one:
    {"password": "hunter2!"}, {"DB_PASSWORD": "s3cr3t"}; the key carries the meaning."""
    return (isinstance(key, str) and isinstance(value, str) and _key_names_secret(key)
            and not is_placeholder(value, quoted=True)
            and ((len(value) >= 4 and not value.isdigit()) or looks_secret(value)))


@functools.lru_cache(maxsize=1024)
def _key_names_secret(key: str) -> bool:
    """Remembered: a drain asks about the same few keys ("id", "kind", "paths", …) for
    every event, and the pattern was 3 % of its CPU."""
    return len(key) <= 80 and _SECRET_KEY.fullmatch(key) is not None


def scrub_value(value: Any, _depth: int = 0) -> Any:
    """scrub_text over every string of a JSON value (keys too), at any depth; a string
    member whose key names a secret is replaced whole."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, bool | int | float) or value is None:
        return value
    if _depth >= MAX_DEPTH:
        return WITHHELD
    if isinstance(value, dict):
        return {scrub_text(str(k)): marker(ASSIGNMENT) if _secret_named(k, v)
                else scrub_value(v, _depth + 1) for k, v in value.items()}
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
            if _secret_named(k, v):
                found.append(ASSIGNMENT)
            else:
                _collect(v, found, depth + 1)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect(v, found, depth + 1)
    else:
        found.append("unscrubbable")
