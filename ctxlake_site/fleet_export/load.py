"""Write a checked export: into a new fleet (statuses kept) or merged into one (proposals).

Everything runs in the caller's transaction (the command wraps one around it, and rolls it
back for --dry-run), so an import is all or nothing. Text arrives scrubbed (check.py) and
each row with text others read gets the instruction screen's verdict here, through the
same `screen_text_fields()` the domain actions call. Counts a claim's independent sessions
are recomputed from this fleet's own sessions, never taken from the file: the gate reads
them.

- New fleet: every row as exported, claim numbers kept (cc-07 stays cc-07), the history
  of each claim copied; people and tokens who acted are kept as names in the event's data,
  never bound to this server's accounts. Claims and their events are written by
  claims.moderation.restore_claims (the claims app's only writers of claim state live
  there): a promoted claim stays promoted only with the person's recorded promotion.
- Merge: agents, sessions and handoffs the fleet lacks are added (handoffs as `ingested`);
  claims go through claims.moderation.propose_many like any proposal, so nothing is ever
  promoted, and a claim the fleet already holds with the same text and citations is left
  alone. That, and the import record below, make a second import of the same export a
  no-op.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from claims import moderation, tasks
from claims.models import Claim, ClaimEvent, Evidence, text_hash
from ctxlake_site.fleet_export import layout, rows
from ctxlake_site.fleet_export.check import MERGED_STATUSES, Checked
from fleet import activity, lineage, rendering
from fleet.models import Activity, Agent, Fleet, Handoff, Session
from mcp_bridge import contract
from mcp_bridge.contract import events as ev

IMPORTED = "fleet.imported"  # the activity verb an import records


class TargetRefused(Exception):
    """The target fleet cannot take this import (it exists, or it does not)."""


@dataclass
class Outcome:
    fleet: str
    mode: str  # "new" or "merge"
    created: Counter[str] = field(default_factory=Counter)
    unchanged: Counter[str] = field(default_factory=Counter)
    already_imported: bool = False
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"fleet": self.fleet, "mode": self.mode, "dry_run": self.dry_run,
                "already_imported": self.already_imported, "created": dict(+self.created),
                "unchanged": dict(+self.unchanged)}


def _at(value: str | None) -> datetime | None:
    return None if value is None else ev.parse_instant(value)


def _when(value: str) -> datetime:
    """A time the row must have (check.py has refused a line without it)."""
    return ev.parse_instant(value)


def _number(public_id: str) -> int:
    return int(public_id.removeprefix("cc-"))


def import_archive(checked: Checked, *, fleet: str | None = None, into: str | None = None,
                   dry_run: bool = False) -> Outcome:
    """One transaction; rolled back at the end for a dry run (so the counts are real)."""
    with transaction.atomic():
        if fleet is not None:
            outcome = into_new_fleet(checked, fleet)
        else:
            assert into is not None
            outcome = merge_into(checked, into)
        outcome.dry_run = dry_run
        if dry_run:
            transaction.set_rollback(True)
    return outcome


def _seen_before(fleet: Fleet, checked: Checked) -> bool:
    return Activity.objects.filter(fleet=fleet, verb=IMPORTED,
                                   data__manifest_sha256=checked.digest).exists()


def _record(fleet: Fleet, checked: Checked, outcome: Outcome) -> None:
    activity.record(fleet, IMPORTED, manifest_sha256=checked.digest, mode=outcome.mode,
                    source_fleet=checked.manifest.get("fleet"), created=dict(outcome.created))
    rendering.request_render(fleet)
    tasks.request_embedding()


# --- into a new fleet ---------------------------------------------------------------------

def into_new_fleet(checked: Checked, slug: str) -> Outcome:
    outcome = Outcome(fleet=slug, mode="new")
    if not contract.FLEET_ID_RE.fullmatch(slug):
        raise TargetRefused(f"{slug!r} is not a fleet id: 1-64 letters, digits, - or _")
    existing = Fleet.objects.filter(slug=slug).first()
    if existing is not None:
        if _seen_before(existing, checked):
            outcome.already_imported = True
            return outcome
        raise TargetRefused(f"fleet {slug!r} exists; merge into it with --into {slug} "
                            "--as-proposals, or name a new fleet")
    fleet = _new_fleet(checked, slug)
    agents = _agents(fleet, checked.rows(layout.AGENTS), outcome)
    sessions = _sessions(fleet, agents, checked.rows(layout.SESSIONS), outcome)
    _handoffs(fleet, agents, sessions, checked.rows(layout.HANDOFFS), outcome)
    claims = _claims(fleet, agents, checked, outcome)
    _evidence(claims, agents, checked.rows(layout.EVIDENCE), outcome)
    _record(fleet, checked, outcome)
    return outcome


def _new_fleet(checked: Checked, slug: str) -> Fleet:
    row = checked.rows(layout.FLEET)[0]
    numbers = [_number(r["id"]) for r in checked.rows(layout.CLAIMS)]
    fleet = Fleet(**{f: row[f] for f in rows.FLEET_FIELDS if f != "slug"}, slug=slug,
                  claim_seq=max(numbers, default=0))
    fleet.full_clean(validate_unique=False)  # the model's validators too (e.g. the TTL)
    fleet.save()
    return fleet


def _agents(fleet: Fleet, lines: list[dict[str, Any]], outcome: Outcome) -> dict[str, Agent]:
    """The fleet's agents by id: those it has, plus the export's others (created)."""
    have = {a.agent_id: a for a in Agent.objects.filter(fleet=fleet)}
    new = [Agent(fleet=fleet, agent_id=r["agent_id"], runtime=r["runtime"], host=r["host"],
                 last_seen_at=_at(r["last_seen_at"]), created_at=_when(r["created_at"]))
           for r in lines if r["agent_id"] not in have]
    Agent.objects.bulk_create(new)
    outcome.created["agents"] += len(new)
    outcome.unchanged["agents"] += len(lines) - len(new)
    return {**have, **{a.agent_id: a for a in new}}


def _sessions(fleet: Fleet, agents: dict[str, Agent], lines: list[dict[str, Any]],
              outcome: Outcome) -> dict[str, Session]:
    have = {s.session_id: s for s in Session.objects.filter(fleet=fleet)}
    new = []
    for r in lines:
        if r["session_id"] in have:
            continue
        s = Session(fleet=fleet, agent=agents[r["agent"]], session_id=r["session_id"],
                    repo=r["repo"], branch=r["branch"], outcome=r["outcome"],
                    summary=r["summary"], changed_paths=r["changed_paths"],
                    started_at=_when(r["started_at"]), ended_at=_at(r["ended_at"]),
                    first_seen_at=_at(r["first_seen_at"]), last_seen_at=_at(r["last_seen_at"]))
        s.screen_text_fields()
        new.append(s)
    Session.objects.bulk_create(new)
    outcome.created["sessions"] += len(new)
    outcome.unchanged["sessions"] += len(lines) - len(new)
    return {**have, **{s.session_id: s for s in new}}


def _handoff_key(agent_id: str, created_at: datetime | None, summary: str) -> tuple[Any, ...]:
    return (agent_id, created_at, summary)


def _handoffs(fleet: Fleet, agents: dict[str, Agent], sessions: dict[str, Session],
              lines: list[dict[str, Any]], outcome: Outcome, *, trust: str | None = None,
              ) -> None:
    """`trust`: the source trust to give them (a merge marks them ingested)."""
    have = {_handoff_key(*k) for k in Handoff.objects.filter(fleet=fleet).values_list(
        "from_agent__agent_id", "created_at", "summary")}
    new = []
    for r in lines:
        if _handoff_key(r["from_agent"], _at(r["created_at"]), r["summary"]) in have:
            continue
        h = Handoff(fleet=fleet, from_agent=agents[r["from_agent"]],
                    from_session=sessions.get(r["from_session"] or ""), summary=r["summary"],
                    status=r["status"], next_steps=r["next_steps"],
                    source_trust=trust or r["source_trust"], state=r["state"],
                    picked_up_by=agents.get(r["picked_up_by"] or ""),
                    picked_up_session=sessions.get(r["picked_up_session"] or ""),
                    picked_up_at=_at(r["picked_up_at"]), created_at=_when(r["created_at"]),
                    updated_at=_when(r["updated_at"]))
        h.screen_text_fields()
        new.append(h)
    Handoff.objects.bulk_create(new)
    outcome.created["handoffs"] += len(new)
    outcome.unchanged["handoffs"] += len(lines) - len(new)


def _claim(fleet: Fleet, agents: dict[str, Agent], r: dict[str, Any],
           vector: dict[str, Any] | None) -> Claim:
    claim = Claim(
        fleet=fleet, number=_number(r["id"]), text=r["text"], text_hash=text_hash(r["text"]),
        type=r["type"], subject=r["subject"], scope=r["scope"], status=r["status"],
        contested=r["contested"], confidence=r["confidence"], staleness=r["staleness"],
        extractor=r["extractor"], proposed_by=agents.get(r["proposed_by"] or ""),
        created_at=_when(r["created_at"]), promoted_at=_at(r["promoted_at"]),
        valid_until=_at(r["valid_until"]))
    if vector is not None:
        claim.embedding, claim.embedding_model = vector["embedding"], vector["model"]
    claim.screen_text_fields()
    return claim


def _claims(fleet: Fleet, agents: dict[str, Agent], checked: Checked,
            outcome: Outcome) -> dict[str, Claim]:
    """The claims and their history, through claims.moderation.restore_claims."""
    vectors = {r["claim"]: r for r in checked.rows(layout.VECTORS)}
    counts = _session_counts(fleet, checked)
    lines = checked.rows(layout.CLAIMS)
    claims = {r["id"]: _claim(fleet, agents, r, vectors.get(r["id"])) for r in lines}
    for public_id, claim in claims.items():
        claim.independent_sessions = counts[public_id]
    events = _events(claims, agents, checked.rows(layout.EVENTS))
    moderation.restore_claims(list(claims.values()), events)
    superseded = [(claims[r["id"]], claims[r["superseded_by"]]) for r in lines
                  if r["superseded_by"]]
    for old, new in superseded:
        old.superseded_by = new
    Claim.objects.bulk_update([old for old, _ in superseded], ["superseded_by"])
    outcome.created["claims"] += len(claims)
    outcome.created["claim_events"] += len(events)
    return claims


def _evidence(claims: dict[str, Claim], agents: dict[str, Agent],
              lines: list[dict[str, Any]], outcome: Outcome) -> None:
    new = []
    for r in lines:
        e = Evidence(claim=claims[r["claim"]], agent=agents.get(r["agent"] or ""),
                     created_at=_when(r["created_at"]), **{k: r[k] for k in ev.CITATION_LIMITS})
        e.screen_text_fields()
        new.append(e)
    Evidence.objects.bulk_create(new, batch_size=2000)
    outcome.created["evidence"] += len(new)


def _session_counts(fleet: Fleet, checked: Checked) -> dict[str, int]:
    """Each claim's independent sessions under this server's rule (fleet.lineage), from
    the sessions just written and the export's citations; never the file's own figure."""
    cited: dict[str, list[str]] = {r["id"]: [] for r in checked.rows(layout.CLAIMS)}
    for r in checked.rows(layout.EVIDENCE):
        cited[r["claim"]].append(r["session_id"])
    return dict(zip(cited, lineage.independent_counts(fleet, list(cited.values())),
                    strict=True))


def _events(claims: dict[str, Claim], agents: dict[str, Agent],
            lines: list[dict[str, Any]]) -> list[ClaimEvent]:
    """Each claim's history; people and tokens who acted are kept as names in the data."""
    new = []
    for r in lines:
        names = {k: r["actor"][k] for k in ("user", "token") if r["actor"][k]}
        data = {**r["data"], rows.IMPORTED_ACTOR: names} if names else r["data"]
        new.append(ClaimEvent(claim=claims[r["claim"]], kind=r["kind"], note=r["note"],
                              actor_agent=agents.get(r["actor"]["agent"] or ""), data=data,
                              at=_when(r["at"])))
    return new


# --- merged into an existing fleet ----------------------------------------------------------

def merge_into(checked: Checked, slug: str) -> Outcome:
    outcome = Outcome(fleet=slug, mode="merge")
    fleet = Fleet.objects.select_for_update().filter(slug=slug).first()
    if fleet is None:
        raise TargetRefused(f"no fleet {slug!r} to merge into; to create it use --fleet {slug}")
    if _seen_before(fleet, checked):
        outcome.already_imported = True
        return outcome
    agents = _agents(fleet, checked.rows(layout.AGENTS), outcome)
    # Sessions are not merged: a Session row is what makes a citation verified here
    # (fleet.lineage), and another server's word must not count toward this fleet's
    # promotion gate. Citations of sessions this fleet never saw stay unverified.
    sessions = {s.session_id: s for s in Session.objects.filter(fleet=fleet)}
    unseen = [r for r in checked.rows(layout.SESSIONS) if r["session_id"] not in sessions]
    outcome.unchanged["sessions not merged (unverified here)"] += len(unseen)
    _handoffs(fleet, agents, sessions, checked.rows(layout.HANDOFFS), outcome,
              trust=Handoff.SourceTrust.INGESTED)
    _propose(fleet, agents, checked, outcome)
    if +outcome.created:  # unary plus: the counts above zero
        _record(fleet, checked, outcome)
    return outcome


def _cited_here(fleet: Fleet, hashes: set[str]) -> dict[str, set[tuple[str, str]]]:
    """For each text hash, the (session, message) pairs the fleet's claims with that text
    cite, whatever their status: a person may have rejected an earlier import already."""
    out: dict[str, set[tuple[str, str]]] = {}
    for h, sid, mid in Evidence.objects.filter(
            claim__fleet=fleet, claim__text_hash__in=hashes).values_list(
            "claim__text_hash", "session_id", "message_id"):
        out.setdefault(h, set()).add((sid, mid))
    return out


def _propose(fleet: Fleet, agents: dict[str, Agent], checked: Checked,
             outcome: Outcome) -> None:
    """Live claims of the export as proposals (the one path every proposal takes); those
    the fleet already holds with this text and these citations are left alone."""
    cites: dict[str, list[dict[str, Any]]] = {}
    for r in checked.rows(layout.EVIDENCE):
        cites.setdefault(r["claim"], []).append({k: r[k] for k in ev.CITATION_LIMITS})
    wanted = [r for r in checked.rows(layout.CLAIMS) if r["status"] in MERGED_STATUSES]
    outcome.unchanged["claims decided in the source"] += (
        len(checked.rows(layout.CLAIMS)) - len(wanted))
    here = _cited_here(fleet, {text_hash(r["text"]) for r in wanted})
    requests = []
    for r in wanted:
        pairs = {(c["session_id"].strip(), c["message_id"].strip()) for c in cites[r["id"]]}
        if pairs <= here.get(text_hash(r["text"]), set()):
            outcome.unchanged["claims"] += 1
            continue
        requests.append(moderation.ProposalRequest(
            r["text"], r["type"], r["subject"], cites[r["id"]],
            by_agent=agents.get(r["proposed_by"] or ""), extractor=r["extractor"]))
    for result in moderation.propose_many(fleet, requests):
        if isinstance(result, moderation.InvalidProposal):
            raise result  # check.py applied the same rules; reaching this is a bug
        key = ("claims proposed" if result.created else
               "claims corroborated" if result.evidence_added else "claims")
        (outcome.created if key != "claims" else outcome.unchanged)[key] += 1
