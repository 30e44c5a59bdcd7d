"""API tokens: issue one (the secret is shown once), look one up by its secret, revoke it.

Only a SHA-256 of the secret is stored, plus a short prefix so a person can tell tokens
apart in the admin and in logs. A token is a high-entropy random string, so a plain
(unsalted) hash is enough: there is nothing to brute-force from a dictionary.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import connection, transaction
from django.db.models import Field, Model
from django.utils import timezone

from fleet import activity
from fleet.models import Agent, ApiToken, Fleet
from mcp_bridge.contract.redact_rules import API_TOKEN_PREFIX

M = TypeVar("M", bound=Model)
SECRET_PREFIX = API_TOKEN_PREFIX  # the redactor knows the shape (mcp_bridge.contract)
PREFIX_LEN = 12
#: last_used_at is refreshed at most this often: a write per request would cost more than
#: the request itself, and "used in the last minute" is all an operator needs to know.
TOUCH_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Issued:
    token: ApiToken
    secret: str  # shown once; never stored


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def fit_problem(
    fleet: Fleet, role: str, agent: Agent | None, relays: Iterable[Agent] = ()
) -> str | None:
    """Why this role, bound agent and relay list do not make a token of `fleet`, or None.

    The one rule, asked by issue_token, set_relays and the admin form: agents belong to
    the token's fleet; only a host token has a relay list, and it is never bound to one
    agent (it speaks for each agent its lines name, checked per line).
    """
    relays = list(relays)
    if role not in ApiToken.Role.values:
        return f"role must be one of {', '.join(ApiToken.Role.values)}"
    strangers = [a.agent_id for a in [*([agent] if agent else []), *relays]
                 if a.fleet_id != fleet.pk]
    if strangers:
        return f"agent(s) {', '.join(strangers)} not in fleet {fleet.slug}"
    if role == ApiToken.Role.HOST and agent is not None:
        return "a host token is not bound to one agent: list its agents as relays instead"
    if role != ApiToken.Role.HOST and relays:
        return "only a host token relays for a list of agents"
    return None


@transaction.atomic
def issue_token(
    fleet: Fleet,
    *,
    role: str,
    name: str,
    agent: Agent | None = None,
    relays: Iterable[Agent] = (),
    by: Any = None,
) -> Issued:
    """Create a token for `fleet` and `role`; ValueError for a role/agents that do not fit."""
    relays = list(relays)
    problem = fit_problem(fleet, role, agent, relays)
    if problem:
        raise ValueError(problem)
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        fleet=fleet,
        name=name,
        role=role,
        agent=agent,
        prefix=secret[:PREFIX_LEN],
        key_hash=hash_secret(secret),
        created_by=by if getattr(by, "pk", None) else None,
    )
    token.relays_for.set(relays)
    extra: dict[str, Any] = {"relays": sorted(a.agent_id for a in relays)} if relays else {}
    activity.record(fleet, "token.issued", target=token, user=by, role=role, name=name, **extra)
    return Issued(token=token, secret=secret)


@transaction.atomic
def set_relays(token: ApiToken, agents: Iterable[Agent], *, by: Any = None) -> ApiToken:
    """Make `agents` the host token's relay list: an agent joins or leaves a shared host.

    Audited ("token.relays_changed", with who was added and removed), since the list is
    what decides whose writes the host may speak for. ValueError when they do not fit.
    """
    agents = list(agents)
    problem = fit_problem(token.fleet, token.role, token.agent, agents)
    if problem:
        raise ValueError(problem)
    before = set(token.relays_for.values_list("agent_id", flat=True))
    after = {a.agent_id for a in agents}
    token.relays_for.set(agents)
    if before != after:
        activity.record(token.fleet, "token.relays_changed", target=token, user=by,
                        name=token.name, added=sorted(after - before),
                        removed=sorted(before - after))
    return token


@dataclass(frozen=True)
class Speakers:
    """Whose spool lines a token may relay: the rule for the spool upload, per line.

    `only` None means any agent of the fleet (an operator token); otherwise the agent ids
    it speaks for: an agent token's one agent, a host token's relay list.
    """

    only: frozenset[str] | None
    host: str | None = None  # a host token's name, for the refusal's reason


def speakers(token: ApiToken | None) -> Speakers:
    """Who `token` may speak for in spool lines (a staff session: anyone, as an operator)."""
    if token is None:
        return Speakers(only=None)
    if token.role == ApiToken.Role.HOST:
        ids = token.relays_for.values_list("agent_id", flat=True)
        return Speakers(only=frozenset(ids), host=token.name)
    if token.role == ApiToken.Role.AGENT and token.agent is not None:
        return Speakers(only=frozenset({token.agent.agent_id}))
    return Speakers(only=None)


def token_for_secret(secret: str) -> ApiToken | None:
    """The live token with this secret, with its fleet and agent loaded; None otherwise.

    Every API request asks this, so it is one precompiled statement: the ORM's
    `select_related("fleet", "agent").filter(…).first()` spent ~1.0 ms of CPU per request
    compiling the same three-table SELECT (1.16 ms in all against 0.12 ms for the
    statement itself, 2026-12-04), a fifth of a lease claim's cost. The columns come from
    the models' own field lists and the rows are built with `Model.from_db`, as the ORM
    builds them; tests/fleet/test_token_lookup.py holds it equal to the ORM's answer.
    """
    if not secret.startswith(SECRET_PREFIX):
        return None
    with connection.cursor() as cursor:
        cursor.execute(_lookup_sql(), [hash_secret(secret)])
        row = cursor.fetchone()
    if row is None:
        return None
    token_n, fleet_n = len(_layout(ApiToken)[0]), len(_layout(Fleet)[0])
    token = _from_row(ApiToken, row[:token_n])
    token.fleet = _from_row(Fleet, row[token_n : token_n + fleet_n])
    agent = row[token_n + fleet_n :]
    token.agent = _from_row(Agent, agent) if agent[0] is not None else None
    return token


def _fields(model: type[Model]) -> list[Field[Any, Any]]:
    return list(model._meta.concrete_fields)


@functools.cache
def _layout(model: type[Model]) -> tuple[list[Field[Any, Any]], list[str], list[list[Any]]]:
    """A model's fields, their attribute names and each one's database converters: the
    same on every request, so looked up once per process."""
    fields = _fields(model)
    return fields, [f.attname for f in fields], [f.get_db_converters(connection) for f in fields]


def _from_row(model: type[M], values: tuple[Any, ...]) -> M:
    """An instance as the ORM would load it: each value through its field's converters
    (JSON decoded and the like), then `Model.from_db`."""
    fields, names, converters = _layout(model)
    converted = []
    for field, convert_all, value in zip(fields, converters, values, strict=True):
        for convert in convert_all:
            value = convert(value, field, connection)
        converted.append(value)
    return model.from_db(connection.alias, names, converted)


@functools.cache
def _lookup_sql() -> str:
    """token ⋈ fleet ⟕ agent by key hash, live only: each model's columns, in field order."""
    q = connection.ops.quote_name

    def columns(model: type[Model], alias: str) -> str:
        return ", ".join(f"{alias}.{q(str(f.column))}" for f in _fields(model))

    t, f, a = (q(m._meta.db_table) for m in (ApiToken, Fleet, Agent))
    return (
        f"SELECT {columns(ApiToken, 't')}, {columns(Fleet, 'f')}, {columns(Agent, 'a')} "
        f"FROM {t} t JOIN {f} f ON f.id = t.fleet_id LEFT JOIN {a} a ON a.id = t.agent_id "
        "WHERE t.key_hash = %s AND t.revoked_at IS NULL ORDER BY t.id LIMIT 1"
    )


def touch(token: ApiToken, *, now: datetime | None = None) -> None:
    """Record use, but write at most once per TOUCH_EVERY per token."""
    now = now or timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < TOUCH_EVERY:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now


@transaction.atomic
def revoke_token(token: ApiToken, *, by: Any = None, now: datetime | None = None) -> bool:
    """Revoke `token`; False if it already was (the first revocation time is kept)."""
    won = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=now or timezone.now()
    )
    token.refresh_from_db()
    if won:
        activity.record(token.fleet, "token.revoked", target=token, user=by, name=token.name)
    return bool(won)
