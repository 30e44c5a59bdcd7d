"""The only writers of claim state, and the promotion gate.

Every change of a claim's status, text or evidence goes through a function here: one
function, one transaction, one ClaimEvent with its actor, then a (debounced) re-render of
the fleet's cache. Views, admin actions, commands, the REST API and the spool drain all
call these; nothing else writes `Claim.status`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from claims import contradictions, lexicon, tallies, tasks
from claims.models import (
    Claim,
    ClaimEvent,
    ClaimStatus,
    Evidence,
    text_hash,
)
from claims.moderators import GateRefused as GateRefused
from claims.moderators import can_moderate as can_moderate
from fleet import column_update, lineage, rendering
from fleet.models import Agent, ApiToken, Fleet, FleetModerator, Screened, take_claim_numbers  # noqa: F401 - re-exported for tests
from mcp_bridge.contract import events as ev
from mcp_bridge.contract import redact, screen
from mcp_bridge.contract import usefulness as usefulness_rule
from mcp_bridge.contract.globs import canonical

MAX_CITATIONS = ev.CITATIONS_MAX
CITATION_FIELDS = tuple(ev.CITATION_LIMITS)
FIELD_LIMITS = ev.CITATION_LIMITS


class InvalidProposal(ValueError):
    """A proposal the caller can fix (no evidence, a blank citation, too many citations…)."""


class AlreadyDecided(Exception):
    """Someone else changed the claim's status first."""


@dataclass(frozen=True)
class Proposal:
    claim: Claim
    created: bool  # False: an existing claim was corroborated instead
    evidence_added: int


def clean_citations(evidence: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Validate and scrub citations; InvalidProposal names the first problem."""
    citations = list(evidence)
    if not citations:
        raise InvalidProposal("No evidence, no claim: cite at least one session_id and message_id.")
    if len(citations) > MAX_CITATIONS:
        raise InvalidProposal(f"At most {MAX_CITATIONS} citations; got {len(citations)}.")
    cleaned = []
    for i, raw in enumerate(citations):
        if not isinstance(raw, Mapping):
            raise InvalidProposal(f"evidence[{i}] must be an object")
        unknown = set(raw) - set(CITATION_FIELDS)
        if unknown:
            raise InvalidProposal(f"evidence[{i}] has unknown keys: {', '.join(sorted(unknown))}")
        item = {k: redact.scrub_text(str(raw.get(k) or "")).strip() for k in CITATION_FIELDS}
        for key in ("session_id", "message_id"):
            if not item[key]:
                raise InvalidProposal(f"evidence[{i}].{key} must not be empty")
        for key, limit in FIELD_LIMITS.items():
            if len(item[key]) > limit:
                raise InvalidProposal(f"evidence[{i}].{key} is longer than {limit} characters")
        item["path"] = canonical(item["path"]) if item["path"] else ""  # as SQL compares it
        cleaned.append(item)
    return cleaned


def _add_evidence(claim: Claim, citations: list[dict[str, str]], agent: Agent | None) -> int:
    before = claim.evidence.count()
    Evidence.objects.bulk_create(
        [_evidence(claim, agent, c) for c in citations], ignore_conflicts=True
    )
    return claim.evidence.count() - before


def _evidence(claim: Claim, agent: Agent | None, citation: Mapping[str, str]) -> Evidence:
    """An unsaved citation row with the instruction screen's verdict on its excerpt."""
    row = Evidence(claim=claim, agent=agent, **citation)
    row.screen_text_fields()
    return row


def session_count(claim: Claim) -> int:
    """The claim's independent verified sessions (fleet.lineage): the one number the gate
    checks, `Claim.independent_sessions` stores and agents, REST and the admin show."""
    ids = claim.evidence.values_list("session_id", flat=True)
    return lineage.independent_sessions(claim.fleet, ids)


def recount_claims(
    fleet: Fleet | None = None, *, commit: bool = False
) -> list[tuple[Claim, int, int]]:
    """Recount stored `independent_sessions` under the current rule (verified sessions
    only), e.g. after upgrading from counting whatever ids were cited. Returns (claim,
    before, after) for each claim whose count changes; writes them, with a `corroborated`
    event noting the recount, only with `commit`."""
    qs = Claim.objects.select_related("fleet").defer("embedding", "search_vector")
    if fleet is not None:
        qs = qs.filter(fleet=fleet)
    changed = []
    for claim in qs.order_by("fleet_id", "number").iterator():
        after = session_count(claim)
        if after != claim.independent_sessions:
            changed.append((claim, claim.independent_sessions, after))
    if commit:
        with transaction.atomic():
            for claim, before, after in changed:
                Claim.objects.filter(pk=claim.pk).update(independent_sessions=after)
                _event(
                    claim,
                    ClaimEvent.Kind.CORROBORATED,
                    note="recounted: verified sessions only",
                    added=0,
                    sessions_before=before,
                    sessions_after=after,
                    recount=True,
                )
            for f in {claim.fleet for claim, _, _ in changed}:
                rendering.request_render(f)
    return changed


def _recount_sessions(claim: Claim) -> None:
    claim.independent_sessions = session_count(claim)
    Claim.objects.filter(pk=claim.pk).update(independent_sessions=claim.independent_sessions)
    tallies.refresh([claim.pk])


def _event(
    claim: Claim,
    kind: str,
    *,
    user: Any = None,
    agent: Agent | None = None,
    token: ApiToken | None = None,
    note: str = "",
    **data: Any,
) -> None:
    ClaimEvent.objects.create(
        claim=claim,
        kind=kind,
        actor_user=user,
        actor_agent=agent,
        actor_token=token,
        note=note,
        data=data,
    )


LIVE = (ClaimStatus.PROPOSED, ClaimStatus.PROMOTED)


def _same_text(fleet: Fleet, hash_: str) -> Claim | None:
    """The fleet's live claim with this normalised-text hash, row-locked (a promoted one
    first, then the oldest); None if there is none. Rejected, retracted and superseded
    claims do not count: repeating one files a new proposal for a person to look at.

    Hand-written SQL: every proposal (a drain's most frequent write) asks, and almost
    always gets no; the ORM query cost more to build than the indexed lookup to run.
    """
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id FROM claims_claim WHERE fleet_id = %s AND text_hash = %s "
            "AND status = ANY(%s) AND superseded_by_id IS NULL "
            "ORDER BY status = 'promoted' DESC, number LIMIT 1 FOR UPDATE",
            [fleet.pk, hash_, list(LIVE)],
        )
        row = cur.fetchone()
    return None if row is None else Claim.objects.select_related("fleet").get(pk=row[0])


@dataclass(frozen=True)
class ProposalRequest:
    """What `propose_claim` takes, for `propose_many`."""

    text: str
    type: str
    subject: str
    evidence: Iterable[Mapping[str, Any]]
    by_agent: Agent | None = None
    #: the transcript capture's extractor that produced it (events.CAPTURE_EXTRACTORS), or ""
    extractor: str = ""


def propose_claim(
    fleet: Fleet,
    *,
    text: str,
    type: str,
    subject: str,
    evidence: Iterable[Mapping[str, Any]],
    by_agent: Agent | None = None,
) -> Proposal:
    """File a claim for moderation, scrubbed (see `propose_many` for repeats of a claim).

    The scope is always `agent` and the status always `proposed`: no argument can widen
    either. Everything the caller can get wrong is checked before the first write.
    """
    request = ProposalRequest(text, type, subject, evidence, by_agent)
    (result,) = propose_many(fleet, [request])
    if isinstance(result, InvalidProposal):
        raise result
    return result


@dataclass(frozen=True)
class _Checked:
    request: ProposalRequest
    text: str
    subject: str
    citations: list[dict[str, str]]
    hash: str


def _check(request: ProposalRequest) -> _Checked:
    text = redact.scrub_text(request.text).strip()
    subject = redact.scrub_text(request.subject).strip()
    if not text or not subject:
        raise InvalidProposal("A claim needs non-empty text and subject.")
    if len(subject) > cast(int, Claim._meta.get_field("subject").max_length):
        raise InvalidProposal("subject is longer than 200 characters")
    if request.type not in Claim.Type.values:
        raise InvalidProposal(f"type must be one of {', '.join(Claim.Type.values)}")
    if request.extractor not in Claim.Extractor.values:
        raise InvalidProposal(f"extractor must be one of {', '.join(ev.CAPTURE_EXTRACTORS)}")
    return _Checked(request, text, subject, clean_citations(request.evidence), text_hash(text))


def propose_many(
    fleet: Fleet, requests: Sequence[ProposalRequest]
) -> list[Proposal | InvalidProposal]:
    """`propose_claim` for each request in order; new claims are written set-wise.

    1. Check every request (an invalid one gets its InvalidProposal in its place).
    2. One query for which texts the fleet already has as a live claim. The first request
       for a text the fleet lacks creates a proposed claim: runs of them take their numbers
       in one statement, and the claims, their evidence and `proposed` events are inserted
       in one each.
    3. The rest repeat a live claim's exact (normalised) text; `_repeat` says what that
       does. Nothing here ever closes a proposal or promotes anything.
    """
    checked: list[_Checked | InvalidProposal] = []
    for request in requests:
        try:
            checked.append(_check(request))
        except InvalidProposal as exc:
            checked.append(exc)
    valid = [c for c in checked if isinstance(c, _Checked)]
    if not valid:
        return list(cast("list[InvalidProposal]", checked))  # every request failed
    with transaction.atomic(savepoint=False):
        planned = _known_hashes(fleet, {c.hash for c in valid})
        pending: list[_Checked] = []  # new texts, inserted set-wise at the next flush
        created: dict[str, Proposal] = {}
        slots: list[Proposal | InvalidProposal | _Checked] = []
        for c in checked:
            if isinstance(c, InvalidProposal):
                slots.append(c)
            elif c.hash not in planned:
                planned.add(c.hash)
                pending.append(c)
                slots.append(c)
            else:
                # A repeat may file a claim too: flush first, so claims are numbered in
                # request order, exactly as one call per request would number them.
                created.update(_create_claims(fleet, pending))
                pending = []
                existing = _same_text(fleet, c.hash)
                assert existing is not None  # known, or created above in this transaction
                slots.append(_repeat(fleet, existing, c))
        created.update(_create_claims(fleet, pending))
    return [created[s.hash] if isinstance(s, _Checked) else s for s in slots]


def _repeat(fleet: Fleet, existing: Claim, c: _Checked) -> Proposal:
    """A proposal with the exact normalised text of live claim `existing`.

    - Nothing new cited (every session/message pair already on the claim): a replay;
      nothing changes.
    - A verified session the claim does not cite yet (fleet.lineage): the one automatic
      corroboration — the citations are added and a `corroborated` event marked
      automatic records it in the claim's history.
    - Otherwise (the same session again, or sessions the fleet never saw): a new proposal
      in the queue, labelled a likely duplicate of `existing`, for a person to merge or
      keep. The existing claim, and its count, are untouched.
    """
    cited = set(existing.evidence.values_list("session_id", "message_id"))
    new = [e for e in c.citations if (e["session_id"], e["message_id"]) not in cited]
    if not new:
        return Proposal(existing, created=False, evidence_added=0)
    known_sessions = {sid for sid, _ in cited}
    fresh = lineage.verified_sessions(fleet, {e["session_id"] for e in new} - known_sessions)
    if fresh:
        added = corroborate_claim(
            existing,
            citations=new,
            by_agent=c.request.by_agent,
            similarity=1.0,
            automatic=True,
            note="same text from verified session(s) " + ", ".join(sorted(fresh)),
        )
        return Proposal(existing, created=False, evidence_added=added)
    near = (existing, 1.0, Claim.NearRelation.DUPLICATE)
    return _create_claims(fleet, [c], near=near)[c.hash]


def _known_hashes(fleet: Fleet, hashes: set[str]) -> set[str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT DISTINCT text_hash FROM claims_claim WHERE fleet_id = %s "
            "AND text_hash = ANY(%s) AND status = ANY(%s) AND superseded_by_id IS NULL",
            [fleet.pk, sorted(hashes), list(LIVE)],
        )
        return {row[0] for row in cur.fetchall()}


def _create_claims(
    fleet: Fleet, new: list[_Checked], *, near: tuple[Claim, float, str] | None = None
) -> dict[str, Proposal]:
    """Insert `new` claims (numbered in order) with their evidence and events; `near`
    labels them (the claim they are close to, the similarity, the relation)."""
    if not new:
        return {}
    last = take_claim_numbers(fleet.pk, len(new))
    claims, evidence = [], []
    cited = [
        list({(e["session_id"], e["message_id"]): e for e in c.citations}.values()) for c in new
    ]
    counts = lineage.independent_counts(fleet, [[e["session_id"] for e in u] for u in cited])
    for number, c, unique, count in zip(
        range(last - len(new) + 1, last + 1), new, cited, counts, strict=True
    ):
        claim = Claim(
            fleet=fleet,
            number=number,
            text=c.text,
            text_hash=c.hash,
            type=c.request.type,
            subject=c.subject,
            proposed_by=c.request.by_agent,
            # derived (claims.tallies) from the evidence: a proposer does not set it
            confidence=usefulness_rule.confidence(usefulness_rule.Record(evidence_sessions=count)),
            scope=Claim.Scope.AGENT,
            status=Claim.Status.PROPOSED,
            independent_sessions=count,
            extractor=c.request.extractor,
        )
        if near is not None:
            claim.near_claim, claim.near_similarity, claim.near_relation = near
        claim.screen_text_fields()
        claims.append(claim)
        evidence.append((claim, unique))
    Claim.objects.bulk_create(claims)
    Evidence.objects.bulk_create(
        [
            _evidence(claim, claim.proposed_by, e)
            for claim, cited in evidence
            for e in cited
        ]
    )
    ClaimEvent.objects.bulk_create(
        [
            ClaimEvent(
                claim=claim, kind=ClaimEvent.Kind.PROPOSED, actor_agent=claim.proposed_by,
                **_extracted(c.request.extractor),
            )
            for c, claim in zip(new, claims, strict=True)
        ]
    )
    tasks.request_embedding()
    return {
        c.hash: Proposal(claim, created=True, evidence_added=len(cited))
        for c, (claim, cited) in zip(new, evidence, strict=True)
    }


@transaction.atomic(savepoint=False)
def restore_claims(claims: Sequence[Claim], events: Sequence[ClaimEvent]) -> None:
    """Insert claims restored from an export into a new fleet, with their whole history,
    as they were (ctxlake_site.fleet_export): the one way a claim arrives already decided.

    Nothing here decides anything: a claim arrives promoted only together with the
    `promoted` event its person (or operator token) made in the source fleet, which the
    importer has checked already and this checks again. Numbers, text hashes and session
    counts are the caller's.
    """
    recorded = {id(e.claim) for e in events if e.kind == ClaimEvent.Kind.PROMOTED}
    undecided = [c.public_id for c in claims
                 if c.status == ClaimStatus.PROMOTED and id(c) not in recorded]
    if undecided:
        raise GateRefused(f"{', '.join(undecided)}: promoted with no recorded promotion")
    Claim.objects.bulk_create(claims, batch_size=1000)
    ClaimEvent.objects.bulk_create(events, batch_size=2000)
    # confidence is derived here, not taken from the file (the usefulness tallies of the
    # source fleet do not travel: docs/export.md)
    tallies.refresh(c.pk for c in claims)
    tasks.request_embedding()


def _extracted(extractor: str) -> dict[str, Any]:
    """The `proposed` event's note and data for a candidate the transcript capture made."""
    if not extractor:
        return {"data": {}}
    return {"note": f"candidate from a session transcript (extractor: {extractor})",
            "data": {"extractor": extractor}}


@transaction.atomic(savepoint=False)  # only database errors can escape: no savepoint needed
def corroborate_claim(
    claim: Claim,
    *,
    citations: list[dict[str, str]],
    by_agent: Agent | None = None,
    user: Any = None,
    similarity: float | None = None,
    note: str = "",
    automatic: bool = False,
) -> int:
    """Add citations to an existing claim (already-cited ones are skipped); returns how many.

    Called by a moderator's merge, and by `_repeat` for the one automatic case (same text,
    a verified session not cited yet), which the event marks `automatic`.
    """
    added = _add_evidence(claim, citations, by_agent)
    before = claim.independent_sessions
    _recount_sessions(claim)
    _event(
        claim,
        ClaimEvent.Kind.CORROBORATED,
        agent=by_agent,
        user=user,
        note=note,
        added=added,
        similarity=similarity,
        automatic=automatic,
        sessions_before=before,
        sessions_after=claim.independent_sessions,
    )
    if claim.status == Claim.Status.PROMOTED:
        rendering.request_render(claim.fleet)
    return added


def _actor(by: Any) -> dict[str, Any]:
    """How a moderation event names its actor: the person, or the token and its agent."""
    if isinstance(by, ApiToken):
        return {"token": by, "agent": by.agent}
    return {"user": by}


def gate_problems(claim: Claim) -> list[str]:
    """Why `claim` may not be promoted right now; [] means the gate is open."""
    problems = []
    rows = list(claim.evidence.all())  # one read for the citations and the screen
    citations = [{f: getattr(e, f) for f in CITATION_FIELDS} for e in rows]
    if not citations:
        problems.append("it has no evidence")
    elif any(not c["session_id"].strip() or not c["message_id"].strip() for c in citations):
        problems.append("a citation lacks a session or message id")
    need = claim.fleet.min_independent_sessions
    if claim.independent_sessions < need:
        problems.append(
            f"it has {claim.independent_sessions} independent session(s); the fleet needs {need}"
        )
    secrets = redact.find_secrets([claim.text, claim.subject, citations])
    if secrets:
        problems.append(f"it contains what looks like a secret ({', '.join(secrets)})")
    flagged = withheld_reasons(claim, rows)
    if flagged:
        problems.append(f"it reads as instructions to an agent ({flagged}): read the marked "
                        "text, and release it first if it is a plain observation")
    return problems


def withheld_reasons(claim: Claim, evidence: Iterable[Evidence] | None = None) -> str:
    """Why the claim's text or an excerpt of its evidence is withheld from agents, or ""."""
    parts = claim.screened_parts(evidence, pending=True)
    return screen.reasons({label: spans for label, (_, spans) in parts.items()})


def _decide(claim: Claim, user: Any, *, allowed_from: tuple[str, ...], **changes: Any) -> Claim:
    """Move `claim` to a new status only if still in `allowed_from` (first writer wins)."""
    if not can_moderate(user, claim.fleet):
        raise GateRefused("You may not moderate claims in this fleet.")
    won = Claim.objects.filter(pk=claim.pk, status__in=allowed_from).update(**changes)
    if not won:
        current = Claim.objects.filter(pk=claim.pk).values_list("status", flat=True).first()
        raise AlreadyDecided(f"{claim.public_id} is already {current}")
    claim.refresh_from_db()
    return claim


@transaction.atomic
def promote_claim(claim: Claim, *, by: Any, note: str = "") -> Claim:
    """The promotion gate: permission, evidence, independent sessions, no secrets, not retracted."""
    if not can_moderate(by, claim.fleet):
        raise GateRefused("You may not moderate claims in this fleet.")
    locked = Claim.objects.select_for_update().get(pk=claim.pk)
    if locked.status == ClaimStatus.RETRACTED:
        raise GateRefused(f"{locked.public_id} was retracted; it cannot be promoted.")
    if locked.status != ClaimStatus.PROPOSED:
        raise AlreadyDecided(f"{locked.public_id} is already {locked.status}")
    _recount_sessions(locked)  # a cited session may have been seen since it was filed
    problems = gate_problems(locked)
    if problems:
        raise GateRefused(f"{locked.public_id} cannot be promoted: " + "; ".join(problems))
    now = timezone.now()
    claim = _decide(
        locked,
        by,
        allowed_from=(ClaimStatus.PROPOSED,),
        status=ClaimStatus.PROMOTED,
        scope=Claim.Scope.FLEET,
        promoted_at=now,
        promoted_by=None if isinstance(by, ApiToken) else by,
    )
    _event(claim, ClaimEvent.Kind.PROMOTED, note=note, **_actor(by))
    contradictions.find_for(claim)  # marked to agents at once, not at the next scan
    rendering.request_render(claim.fleet)
    return claim


@transaction.atomic
def reject_claim(claim: Claim, *, by: Any, reason: str) -> Claim:
    if not reason or not reason.strip():
        raise GateRefused("Rejecting a claim needs a reason.")
    claim = _decide(claim, by, allowed_from=(ClaimStatus.PROPOSED,), status=ClaimStatus.REJECTED)
    _event(claim, ClaimEvent.Kind.REJECTED, note=reason.strip(), **_actor(by))
    return claim


@transaction.atomic
def contest_claim(claim: Claim, *, by: Any, note: str) -> Claim:
    """Flag a claim as disputed; it stays where it is, labelled CONTESTED for agents."""
    if not can_moderate(by, claim.fleet):
        raise GateRefused("You may not moderate claims in this fleet.")
    Claim.objects.filter(pk=claim.pk).update(contested=True)
    tallies.refresh([claim.pk])
    claim.refresh_from_db()
    _event(claim, ClaimEvent.Kind.CONTESTED, note=note, **_actor(by))
    rendering.request_render(claim.fleet)
    return claim


@transaction.atomic
def retract_claim(claim: Claim, *, by: Any, note: str) -> Claim:
    """Withdraw a claim from agents for good (it stays in the record)."""
    claim = _decide(
        claim,
        by,
        allowed_from=(ClaimStatus.PROPOSED, ClaimStatus.PROMOTED),
        status=ClaimStatus.RETRACTED,
    )
    _event(claim, ClaimEvent.Kind.RETRACTED, note=note, **_actor(by))
    rendering.request_render(claim.fleet)
    return claim


@transaction.atomic
def send_back_claim(claim: Claim, *, by: Any, note: str) -> Claim:
    """Take a promoted claim out of agents' memory and back into the review queue, where
    it must pass the promotion gate again (memory health's "re-review"); it is proposed
    once more, with its evidence and tallies, in fleet scope."""
    if not note or not note.strip():
        raise GateRefused("Sending a claim back for review needs a note.")
    claim = _decide(claim, by, allowed_from=(ClaimStatus.PROMOTED,), status=ClaimStatus.PROPOSED,
                    promoted_at=None, promoted_by=None)
    _event(claim, ClaimEvent.Kind.SENT_BACK, note=note.strip(), **_actor(by))
    rendering.request_render(claim.fleet)
    return claim


@transaction.atomic
def edit_claim(claim: Claim, *, by: Any, text: str, note: str = "") -> Claim:
    """Reword a proposed claim before promotion; the original text is kept in the event."""
    if not can_moderate(by, claim.fleet):
        raise GateRefused("You may not moderate claims in this fleet.")
    locked = Claim.objects.select_for_update().get(pk=claim.pk)
    if locked.status != ClaimStatus.PROPOSED:
        raise AlreadyDecided(f"{locked.public_id} is already {locked.status}")
    new_text = redact.scrub_text(text).strip()
    if not new_text:
        raise GateRefused("The edited text must not be empty.")
    original = locked.text
    try:
        with transaction.atomic():
            locked.text = new_text  # a person's words are screened too: pasted text is not
            Claim.objects.filter(pk=locked.pk).update(
                text=new_text, text_hash=text_hash(new_text), embedding=None, embedding_model="",
                **_screened(locked),
            )
    except IntegrityError as exc:
        raise GateRefused(f"The edited text is not valid: {exc}") from exc
    locked.refresh_from_db()
    lexicon.index_claims([locked])  # update() skips save(), which keeps the terms
    _event(locked, ClaimEvent.Kind.EDITED, user=by, note=note, original=original)
    tasks.request_embedding()
    return locked


@transaction.atomic
def redact_claim(claim: Claim, *, by: Any = None, note: str = "secrets redacted") -> list[str]:
    """Scrub a stored claim's text, subject and citations with today's redactor, at any
    status; the kinds removed, [] when it was clean.

    For stores written under an older redactor (`manage.py scan_secrets --redact`). Unlike
    edit_claim, the event keeps the kinds removed and never the text they were removed
    from: the audit trail is append-only, so a secret written there would stay for good.
    """
    locked = Claim.objects.select_for_update().get(pk=claim.pk)
    evidence = list(locked.evidence.all())
    cited = [[getattr(e, f) for f in CITATION_FIELDS] for e in evidence]
    kinds = redact.find_secrets([locked.text, locked.subject, cited])
    if not kinds:
        return []
    text, subject = redact.scrub_text(locked.text), redact.scrub_text(locked.subject)[:200]
    if (text, subject) != (locked.text, locked.subject):
        locked.text = text
        Claim.objects.filter(pk=locked.pk).update(
            text=text, subject=subject, text_hash=text_hash(text), embedding=None,
            embedding_model="", **_screened(locked),
        )
        locked.subject = subject
        lexicon.index_claims([locked])  # update() skips save(), which keeps the terms
    for e in evidence:
        changes = {f: redact.scrub_text(getattr(e, f))[: FIELD_LIMITS[f]] for f in CITATION_FIELDS}
        changes = {f: v for f, v in changes.items() if v != getattr(e, f)}
        if changes:
            Evidence.objects.filter(pk=e.pk).update(**changes)
    _event(locked, ClaimEvent.Kind.EDITED, note=note, redacted=kinds,
           **(_actor(by) if by is not None else {}))
    tasks.request_embedding()
    rendering.request_render(locked.fleet)
    return kinds


def _screened(row: Screened) -> dict[str, Any]:
    """The screen's fields for an update() of `row`'s text as it now is (unreleased)."""
    row.screen_text_fields()
    return {"screen_flags": row.screen_flags, "screen_released_at": None,
            "screen_released_by": None}


@transaction.atomic
def merge_claim(claim: Claim, *, into: Claim, by: Any) -> Claim:
    """Fold a proposed claim into an existing one as corroboration, and close the proposal."""
    if into.fleet_id != claim.fleet_id or into.pk == claim.pk:
        raise GateRefused("A claim can only be merged into another claim of the same fleet.")
    if into.status in (ClaimStatus.REJECTED, ClaimStatus.RETRACTED):
        raise GateRefused(f"{into.public_id} is {into.status}; merge into a live claim.")
    citations = list(claim.evidence.values(*CITATION_FIELDS))
    closed = _decide(claim, by, allowed_from=(ClaimStatus.PROPOSED,), status=ClaimStatus.REJECTED)
    _event(
        closed,
        ClaimEvent.Kind.REJECTED,
        note=f"merged into {into.public_id}",
        merged_into=into.public_id,
        **_actor(by),
    )
    actor = _actor(by)
    corroborate_claim(
        into,
        citations=citations,
        user=actor.get("user"),
        by_agent=actor.get("agent"),
        note=f"merged from {claim.public_id}"
        + (" by an operator token" if "token" in actor else ""),
    )
    return into


@transaction.atomic
def supersede_claim(old: Claim, *, by: Any, new: Claim, note: str = "") -> Claim:
    """Replace promoted claim `old` with `new`: `old.superseded_by = new`.

    The old claim stays in the record (and in the timeline, with a `superseded` event) but
    leaves search and the briefing at the next render. A still-proposed `new` is promoted
    through the gate in the same transaction; if the gate refuses, nothing changes.
    """
    if not can_moderate(by, old.fleet):
        raise GateRefused("You may not moderate claims in this fleet.")
    if new.fleet_id != old.fleet_id or new.pk == old.pk:
        raise GateRefused("A claim can only be superseded by another claim of the same fleet.")
    locked = Claim.objects.select_for_update().select_related("fleet").get(pk=old.pk)
    if locked.superseded_by_id is not None:
        raise AlreadyDecided(f"{locked.public_id} is already superseded")
    if locked.status != ClaimStatus.PROMOTED:
        raise GateRefused(
            f"{locked.public_id} is {locked.status}; only a promoted claim is superseded "
            "(reject or retract the others)."
        )
    replacement = Claim.objects.select_for_update().get(pk=new.pk)
    if replacement.superseded_by_id is not None:
        raise GateRefused(f"{replacement.public_id} is itself superseded.")
    if replacement.status == ClaimStatus.PROPOSED:
        replacement = promote_claim(
            replacement, by=by, note=note or f"promoted to supersede {locked.public_id}"
        )
    elif replacement.status != ClaimStatus.PROMOTED:
        raise GateRefused(f"{replacement.public_id} is {replacement.status}.")
    Claim.objects.filter(pk=locked.pk).update(superseded_by=replacement)
    locked.refresh_from_db()
    _event(
        locked,
        ClaimEvent.Kind.SUPERSEDED,
        note=note or f"superseded by {replacement.public_id}",
        superseded_by=replacement.public_id,
        **_actor(by),
    )
    rendering.request_render(locked.fleet)
    return locked


@transaction.atomic
def set_valid_until(claim: Claim, *, by: Any, until: datetime | None, note: str = "") -> Claim:
    """Say until when a claim holds (None: indefinitely). Once past, it leaves search and
    the briefing (the bridge and REST filter on it); the claim itself is unchanged."""
    if not can_moderate(by, claim.fleet):
        raise GateRefused("You may not moderate claims in this fleet.")
    if claim.status not in LIVE:
        raise GateRefused(f"{claim.public_id} is {claim.status}.")
    if until is not None and timezone.is_naive(until):
        raise GateRefused("valid until needs a time zone.")
    Claim.objects.filter(pk=claim.pk).update(valid_until=until)
    claim.refresh_from_db()
    _event(
        claim,
        ClaimEvent.Kind.VALID_UNTIL,
        note=note,
        valid_until=until.isoformat() if until else None,
        **_actor(by),
    )
    if claim.status == ClaimStatus.PROMOTED:
        rendering.request_render(claim.fleet)
    return claim


@dataclass(frozen=True)
class NearLabel:
    """The queue's label for `claim`: its nearest claim, how close, and what that means."""

    claim: Claim
    near: Claim | None
    similarity: float | None
    relation: str


def label_near_claims(labels: list[NearLabel]) -> None:
    """Record the queue's labels ("likely duplicate of cc-12 (0.97)", "possible conflict
    with cc-12"), one statement for a whole embedding pass. A label, not a decision: no
    status, evidence or count changes."""
    rows = [
        Claim(
            pk=label.claim.pk,
            near_claim=label.near,
            near_similarity=None if label.similarity is None else round(label.similarity, 4),
            near_relation=label.relation,
        )
        for label in labels
    ]
    column_update.update_columns(rows, ["near_claim", "near_similarity", "near_relation"])
