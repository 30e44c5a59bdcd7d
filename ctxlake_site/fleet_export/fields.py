"""What each exported line must hold: its keys, and the check of each key's value.

The checks are the contract's (mcp_bridge.contract.events: text, instants, citations,
paths, integers, enums) with the limits of the contract or, where it has none, of the
model field that stores the value: one definition of each rule. A check returns why a
value is refused, or None.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Final, cast

from django.db import models

from claims.models import EMBEDDING_DIMS, Claim, ClaimEvent
from ctxlake_site.fleet_export import layout
from fleet.models import Agent, Fleet, Handoff, Session
from mcp_bridge import contract
from mcp_bridge.contract import events as ev

Check = Callable[[Any, str], "str | None"]

#: Moderators' and automatic notes on claim events (REST takes 2,000; the admin and the
#: moderation functions write longer ones, e.g. a recount naming many sessions).
NOTE_MAX_CHARS: Final = 10_000
#: A claim event's `data` strings (session lists, similarity reports): bounded all the same.
DATA_TEXT_MAX_CHARS: Final = 10_000
INT_MAX: Final = 2**31 - 1
_PUBLIC_ID = re.compile(r"cc-\d{1,9}")


def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    return cast("models.Field[Any, Any]", model._meta.get_field(name))


def _limit(model: type[models.Model], field: str) -> int:
    return cast(int, _field(model, field).max_length)


def _values(model: type[models.Model], field: str) -> tuple[str, ...]:
    return tuple(str(v) for v, _ in _field(model, field).choices or ())


def text(limit: int, *, required: bool = False, one_line: bool = False,
         null: bool = False) -> Check:
    def check(value: Any, name: str) -> str | None:
        if value is None:
            return None if null else f"{name} must be a string"
        return ev.text_problem(value, name, limit, required=required, one_line=one_line)
    return check


def ident(*, null: bool = False) -> Check:
    """An agent or session id (or a reference to one)."""
    return text(ev.ID_MAX_CHARS, required=True, one_line=True, null=null)


def claim_ref(*, null: bool = False) -> Check:
    def check(value: Any, name: str) -> str | None:
        if value is None and null:
            return None
        ok = isinstance(value, str) and _PUBLIC_ID.fullmatch(value)
        return None if ok else f"{name} must be a claim id like cc-07"
    return check


def instant(*, null: bool = False) -> Check:
    def check(value: Any, name: str) -> str | None:
        if value is None:
            return None if null else f"{name} must be an ISO 8601 date and time"
        return ev.instant_problem(value, name)
    return check


def enum(values: tuple[str, ...], *, null: bool = False) -> Check:
    return lambda value, name: ev.enum_problem(value, name, values, required=not null)


def integer(lo: int, hi: int) -> Check:
    return lambda value, name: ev.int_problem(value, name, lo, hi)


def number(lo: float, hi: float) -> Check:
    def check(value: Any, name: str) -> str | None:
        if type(value) not in (int, float) or not math.isfinite(value):
            return f"{name} must be a finite number"
        return None if lo <= value <= hi else f"{name} must be from {lo} to {hi}"
    return check


def boolean(value: Any, name: str) -> str | None:
    return None if isinstance(value, bool) else f"{name} must be true or false"


def paths(value: Any, name: str) -> str | None:
    return ev.paths_problem(value, name, min_items=0, max_items=ev.CHANGED_PATHS_MAX)


def json_object(value: Any, name: str) -> str | None:
    """Free-form JSON (an event's data): an object whose strings are storable text and
    whose numbers are finite and fit 64 bits. Depth is bounded when the line is parsed."""
    if not isinstance(value, dict):
        return f"{name} must be an object"
    return _json_value_problem(value, name)


def _json_value_problem(value: Any, name: str) -> str | None:
    if isinstance(value, str):
        return ev.text_problem(value, name, DATA_TEXT_MAX_CHARS, required=False)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        ok = math.isfinite(value) and abs(value) < 2**63
        return None if ok else f"{name} holds a number out of range"
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        where = f"{name}.{key}" if isinstance(value, dict) else f"{name}[{key}]"
        problem = (ev.text_problem(key, f"{name} key", ev.ID_MAX_CHARS)
                   if isinstance(key, str) else None) or _json_value_problem(item, where)
        if problem:
            return problem
    return None


def actor(value: Any, name: str) -> str | None:
    if not isinstance(value, dict) or set(value) != {"user", "agent", "token"}:
        return f"{name} must be an object with exactly user, agent and token"
    for key in ("user", "agent", "token"):
        problem = text(ev.ID_MAX_CHARS, required=True, one_line=True, null=True)(
            value[key], f"{name}.{key}")
        if problem:
            return problem
    return None


def citation(row: dict[str, Any]) -> str | None:
    """An evidence line's citation keys, by the contract's citation rule."""
    return ev.citations_problem([{k: row[k] for k in ev.CITATION_LIMITS}], "evidence")


def embedding(value: Any, name: str) -> str | None:
    if not isinstance(value, list) or len(value) != EMBEDDING_DIMS:
        return f"{name} must list {EMBEDDING_DIMS} numbers"
    bad = next((i for i, x in enumerate(value) if type(x) not in (int, float)
                or not math.isfinite(x)), None)
    return None if bad is None else f"{name}[{bad}] must be a finite number"


def slug(value: Any, name: str) -> str | None:
    ok = isinstance(value, str) and contract.FLEET_ID_RE.fullmatch(value)
    return None if ok else f"{name} must be 1-64 letters, digits, - or _"


SPECS: Final[dict[str, dict[str, Check]]] = {
    layout.FLEET: {
        "slug": slug, "name": text(_limit(Fleet, "name"), required=True),
        "memory_mode": enum(_values(Fleet, "memory_mode")),
        "capture_mode": enum(_values(Fleet, "capture_mode")),
        "capture_max_candidates": integer(0, contract.CAPTURE_MAX_LIMIT),
        "default_lease_ttl_secs": integer(ev.TTL_MIN_SECS, ev.TTL_MAX_SECS),
        "min_independent_sessions": integer(1, 32767),
        "repo_url_template": text(_limit(Fleet, "repo_url_template"), one_line=True),
        "created_at": instant(),
    },
    layout.AGENTS: {
        "agent_id": ident(), "runtime": text(_limit(Agent, "runtime"), one_line=True),
        "host": text(_limit(Agent, "host"), one_line=True),
        "last_seen_at": instant(null=True), "created_at": instant(),
    },
    layout.SESSIONS: {
        "session_id": ident(), "agent": ident(),
        "repo": text(ev.REPO_MAX_CHARS, one_line=True),
        "branch": text(ev.BRANCH_MAX_CHARS, one_line=True),
        "outcome": enum(_values(Session, "outcome")),
        "summary": text(ev.SUMMARY_MAX_CHARS), "changed_paths": paths,
        "started_at": instant(), "ended_at": instant(null=True),
        "first_seen_at": instant(null=True), "last_seen_at": instant(null=True),
    },
    layout.HANDOFFS: {
        "ref": integer(1, INT_MAX), "from_agent": ident(), "from_session": ident(null=True),
        "summary": text(ev.SUMMARY_MAX_CHARS, required=True),
        "status": enum(_values(Handoff, "status")), "next_steps": text(ev.NEXT_MAX_CHARS),
        "source_trust": enum(_values(Handoff, "source_trust")),
        "state": enum(_values(Handoff, "state")), "picked_up_by": ident(null=True),
        "picked_up_session": ident(null=True), "picked_up_at": instant(null=True),
        "created_at": instant(), "updated_at": instant(),
    },
    layout.CLAIMS: {
        "id": claim_ref(), "text": text(ev.CLAIM_MAX_CHARS, required=True),
        "type": enum(_values(Claim, "type")),
        "subject": text(ev.SUBJECT_MAX_CHARS, required=True),
        "scope": enum(_values(Claim, "scope")), "status": enum(_values(Claim, "status")),
        "contested": boolean, "confidence": number(0, 1), "staleness": number(0, 1),
        "independent_sessions": integer(0, INT_MAX),
        "extractor": enum(_values(Claim, "extractor")), "proposed_by": ident(null=True),
        "superseded_by": claim_ref(null=True), "created_at": instant(),
        "promoted_at": instant(null=True), "valid_until": instant(null=True),
    },
    layout.EVIDENCE: {
        "claim": claim_ref(), **{k: (lambda v, n: None) for k in ev.CITATION_LIMITS},
        "agent": ident(null=True), "created_at": instant(),
    },
    layout.EVENTS: {
        "claim": claim_ref(), "kind": enum(_values(ClaimEvent, "kind")), "actor": actor,
        "note": text(NOTE_MAX_CHARS), "data": json_object, "at": instant(),
    },
    layout.VECTORS: {
        "claim": claim_ref(), "model": text(_limit(Claim, "embedding_model"), required=True,
                                            one_line=True),
        "embedding": embedding,
    },
}

#: Per file, the check of the line as a whole, after its fields (None: no such check).
WHOLE: Final[dict[str, Callable[[dict[str, Any]], str | None]]] = {
    layout.EVIDENCE: citation,
}
