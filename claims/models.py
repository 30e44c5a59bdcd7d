"""Memory: claims the fleet has learned, the evidence behind them, and their audit trail.

A claim reaches agents only once a person promotes it (claims/moderation.py is the only
writer of its status). Evidence citations must name a session and a message, and the
database itself refuses an empty one.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Collection, Iterable
from typing import Any

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models, transaction
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual
from django.utils import timezone
from pgvector.django import HnswIndex, VectorField

from fleet.constraints import contract_choices, in_choices
from fleet.copy_insert import CopyInsertQuerySet
from fleet.models import Agent, ApiToken, Fleet, Screened, Session, take_claim_numbers
from mcp_bridge.contract import bm25
from mcp_bridge.contract import events as ev

EMBEDDING_DIMS = 384
MAX_EXCERPT = ev.EXCERPT_MAX_CHARS
_SPACE = re.compile(r"\s+")


def normalised_text(text: str) -> str:
    """What two claims must share to be exact duplicates: NFKC, casefolded, one space."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def text_hash(text: str) -> str:
    return hashlib.sha256(normalised_text(text).encode()).hexdigest()


class ClaimQuerySet(CopyInsertQuerySet["Claim"]):
    def for_fleet(self, fleet: Fleet) -> ClaimQuerySet:
        return self.filter(fleet=fleet)

    def promoted(self) -> ClaimQuerySet:
        return self.filter(status=Claim.Status.PROMOTED)

    def proposed(self) -> ClaimQuerySet:
        return self.filter(status=Claim.Status.PROPOSED)

    def by_public_id(self, public_id: str) -> ClaimQuerySet:
        match = ev.CLAIM_ID_RE.fullmatch(public_id.strip().lower())
        return self.filter(number=int(match[1])) if match else self.none()

    def live(self, now: Any) -> ClaimQuerySet:
        """Promoted, not superseded, not expired: what agents may be shown."""
        return self.promoted().filter(superseded_by__isnull=True).exclude(valid_until__lt=now)

    def bulk_create(self, objs: Iterable[Claim], *args: Any, **kwargs: Any) -> list[Claim]:
        """Insert claims with their lexical terms (claims.lexicon), in one transaction: a
        bulk insert skips save(), which keeps them for a single claim."""
        from claims import lexicon  # lexicon imports this module

        claims = list(objs)
        with transaction.atomic(savepoint=False):
            cut = lexicon.cut(claims)
            made = super().bulk_create(claims, *args, **kwargs)
            # ignore_conflicts leaves pk unset: a skipped row keeps the terms it had; an
            # upsert (update_conflicts) may have updated a row that has terms to replace
            lexicon.write_terms([(c, t) for c, t in zip(made, cut, strict=True) if c.pk],
                                new=not kwargs.get("update_conflicts"))
        return made


ClaimType = contract_choices("ClaimType", ev.CLAIM_TYPES)


class ClaimScope(models.TextChoices):
    AGENT = "agent", "agent (proposed by one agent)"
    FLEET = "fleet", "fleet (admitted by a moderator)"


class ClaimStatus(models.TextChoices):
    PROPOSED = "proposed", "proposed"
    PROMOTED = "promoted", "promoted"
    REJECTED = "rejected", "rejected"
    RETRACTED = "retracted", "retracted"


class NearRelation(models.TextChoices):
    NONE = "", "—"
    DUPLICATE = "duplicate", "likely duplicate"
    CONFLICT = "conflict", "possible conflict"


#: Where a proposal came from: blank for an agent's own, else the transcript capture's
#: extractor that produced it (the contract's list, so a new extractor needs no edit here).
# mypy understands the functional enum API only for the stdlib's Enum, not TextChoices.
ClaimExtractor = models.TextChoices(  # type: ignore[call-overload]
    "ClaimExtractor",
    [("AGENT", ("", "agent's own")), *((x.upper(), (x, x)) for x in ev.CAPTURE_EXTRACTORS)],
)


#: The permission a person needs to decide claims (with the fleet granted: fleet.scope).
MODERATE_CODENAME = "promote_claim"
MODERATE_PERMISSION = f"claims.{MODERATE_CODENAME}"


class Claim(Screened):
    SCREENED_FIELDS = ("text",)
    SCREEN_AUTHOR = "proposed_by"

    Type = ClaimType

    Extractor = ClaimExtractor

    NearRelation = NearRelation

    Scope = ClaimScope

    Status = ClaimStatus

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="claims")
    number = models.PositiveIntegerField(editable=False, help_text="Per-fleet; shown as cc-NN.")
    text = models.TextField()
    type = models.CharField(max_length=16, choices=Type.choices)
    subject = models.CharField(max_length=ev.SUBJECT_MAX_CHARS)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.AGENT)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PROPOSED)
    contested = models.BooleanField(default=False)
    confidence = models.FloatField(default=0.5)
    staleness = models.FloatField(
        default=0.0, help_text="0 = fresh; towards 1 as the cited files change."
    )
    independent_sessions = models.PositiveIntegerField(
        default=0, help_text="Kept up to date by the moderation functions; filterable."
    )
    text_hash = models.CharField(max_length=64, editable=False)
    embedding = VectorField(dimensions=EMBEDDING_DIMS, null=True, blank=True)
    embedding_model = models.CharField(max_length=100, blank=True)
    search_vector = models.GeneratedField(
        expression=SearchVector("text", weight="A", config="english")
        + SearchVector("subject", weight="B", config="english"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    proposed_by = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="claims_proposed"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    promoted_at = models.DateTimeField(null=True, blank=True, editable=False)
    promoted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="claims_promoted",
    )
    valid_until = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="supersedes"
    )
    # The closest other claim when this one was filed or embedded, and what the pair looks
    # like (claims.conflicts): a label for the moderator, never a decision.
    near_claim = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", editable=False
    )
    near_similarity = models.FloatField(null=True, blank=True, editable=False)
    near_relation = models.CharField(
        max_length=10, blank=True, default="", choices=NearRelation.choices, editable=False
    )

    # The usefulness loop (claims.usefulness keeps these; mcp_bridge.contract.usefulness
    # turns them into `confidence`, unless a moderator has set `confidence_set`).
    served_sessions = models.PositiveIntegerField(default=0, editable=False)
    used_sessions = models.PositiveIntegerField(default=0, editable=False)
    used_succeeded = models.PositiveIntegerField(default=0, editable=False)
    used_partial = models.PositiveIntegerField(default=0, editable=False)
    used_failed = models.PositiveIntegerField(default=0, editable=False)
    open_flags = models.PositiveIntegerField(
        default=0, editable=False, help_text="Agents with an open wrong/outdated feedback."
    )
    confidence_set = models.FloatField(
        null=True, blank=True, editable=False,
        help_text="Set by a moderator (audited); stands in for the derived confidence.",
    )
    stale_since = models.CharField(
        max_length=300, blank=True, default="", editable=False,
        help_text="What marked it possibly stale: \"bo changed src/x.py\".",
    )

    lexical_length = models.PositiveIntegerField(
        default=0, editable=False,
        help_text="Terms in text and subject, as FTS5 counts them (BM25's document length).",
    )

    extractor = models.CharField(
        max_length=max(map(len, ev.CAPTURE_EXTRACTORS)),
        blank=True,
        default="",
        choices=ClaimExtractor.choices,
        editable=False,
        help_text="The transcript capture's extractor that proposed it; blank: an agent did.",
    )

    objects = ClaimQuerySet.as_manager()
    _lexed: tuple[str | None, str | None] | None = None  # (text, subject) its terms are of

    class Meta:
        ordering = ("fleet_id", "number")
        permissions = [(MODERATE_CODENAME, "Can promote, reject, contest and retract claims")]
        constraints = [
            models.UniqueConstraint(fields=("fleet", "number"), name="claims_claim_number_unique"),
            in_choices("type", ClaimType, "claims_claim_type_valid"),
            in_choices("scope", ClaimScope, "claims_claim_scope_valid"),
            in_choices("status", ClaimStatus, "claims_claim_status_valid"),
            in_choices("near_relation", NearRelation, "claims_claim_near_relation_valid"),
            in_choices("extractor", ClaimExtractor, "claims_claim_extractor_valid"),
            models.CheckConstraint(condition=~Q(text=""), name="claims_claim_text_not_blank"),
            models.CheckConstraint(condition=~Q(subject=""), name="claims_claim_subject_not_blank"),
            models.CheckConstraint(
                condition=Q(confidence__gte=0) & Q(confidence__lte=1),
                name="claims_claim_confidence_0_1",
            ),
            models.CheckConstraint(
                condition=Q(staleness__gte=0) & Q(staleness__lte=1),
                name="claims_claim_staleness_0_1",
            ),
            models.CheckConstraint(
                condition=Q(confidence_set__isnull=True)
                | (Q(confidence_set__gte=0) & Q(confidence_set__lte=1)),
                name="claims_claim_confidence_set_0_1",
            ),
            # Promotion and fleet scope go together; neither exists without the other.
            models.CheckConstraint(
                condition=~Q(status="promoted") | (Q(scope="fleet") & Q(promoted_at__isnull=False)),
                name="claims_claim_promoted_is_fleet_scoped",
            ),
            models.CheckConstraint(
                condition=~Q(superseded_by=models.F("id")), name="claims_claim_not_self_superseded"
            ),
            models.CheckConstraint(
                condition=Q(text_hash__regex=r"^[0-9a-f]{64}$"), name="claims_claim_hash_is_sha256"
            ),
        ]
        indexes = [
            HnswIndex(
                name="claims_claim_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
            GinIndex(fields=["search_vector"], name="claims_claim_search_gin"),
            # Which claims have a vector: lets a vector search of a fleet with few (or no)
            # embedded claims skip the rest instead of filtering every row.
            models.Index(
                fields=("fleet", "embedding_model"),
                condition=Q(embedding__isnull=False),
                name="claims_claim_embedded",
            ),
            # Which claims wait for a vector: the embedding pass that follows every burst of
            # proposals finds them without reading the table (embeddings.needing_embedding).
            models.Index(
                fields=("fleet",),
                condition=Q(embedding__isnull=True),
                name="claims_claim_unembedded",
            ),
            models.Index(fields=("fleet", "status", "created_at"), name="claims_claim_queue"),
            models.Index(fields=("fleet", "text_hash"), name="claims_claim_by_hash"),
            models.Index(fields=("fleet", "subject"), name="claims_claim_by_subject"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id}: {self.text[:60]}"

    @classmethod
    def from_db(cls, db: str | None, field_names: Collection[str], values: Collection[Any],
                **kwargs: Any) -> Claim:
        """As loaded, remembering the text and subject its stored terms are of."""
        claim = super().from_db(db, field_names, values, **kwargs)
        claim._lexed = (claim.__dict__.get("text"), claim.__dict__.get("subject"))
        return claim

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save, keeping what is derived from the text in the same transaction: its hash,
        and (when text or subject changed) its lexical terms (claims.lexicon)."""
        from claims import lexicon  # lexicon imports this module

        self.text_hash = text_hash(self.text)
        fields = kwargs.get("update_fields")
        relex = (self.text, self.subject) != getattr(self, "_lexed", None) and (
            fields is None or bool({"text", "subject"} & set(fields)))
        if relex and fields is not None:
            kwargs["update_fields"] = [*fields, "lexical_length", "text_hash"]
        with transaction.atomic(savepoint=False):
            if self.number is None:
                self.number = take_claim_numbers(self.fleet_id)
            cut = lexicon.cut([self]) if relex else []
            inserted = self.pk is None  # an instance given an id may update a row
            super().save(*args, **kwargs)
            if relex:
                lexicon.write_terms([(self, cut[0])], new=inserted)
                self._lexed = (self.text, self.subject)

    @property
    def public_id(self) -> str:
        return f"cc-{self.number:02d}"

    def screened_parts(self, evidence: Iterable[Evidence] | None = None, *, pending: bool,
                       ) -> dict[str, tuple[str, list[dict[str, Any]]]]:
        """{label: (text, spans)} of the flagged text of the claim and its excerpts, the
        two a release treats as one (`pending`: only what no person has released yet)."""
        rows: list[Screened] = [self, *(self.evidence.all() if evidence is None else evidence)]
        return {
            name if row is self else f"evidence {row.pk} excerpt": (getattr(row, name), spans)
            for row in rows if row.screen_pending or (row.screen_flags and not pending)
            for name, spans in row.screen_flags.items()
        }


class ClaimTerm(models.Model):
    """One term of a claim's text and subject as the bridge's FTS5 index holds it, with
    its count in each: what the server's BM25 reads (claims/search.py). Written with the
    claim, in its transaction, by claims.lexicon; never edited."""

    # No foreign key constraints in the database (db_constraint=False): these rows are an
    # index of their claim, written only by claims.lexicon in the claim's own transaction,
    # and a drain batch writes tens of thousands of them, whose two deferred key checks
    # were two thirds of the batch's COMMIT (bench/pipeline_bench.py: 1.8 s of 5.7 s per
    # 10k events, 0.6 s without them). Deleting a claim still deletes its terms: Django
    # cascades, and the trigger `claims_claim_drop_terms` (migration 0014) covers a
    # delete that bypasses Django.
    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="terms",
                              db_index=False,  # the unique constraint leads with it
                              db_constraint=False)
    # the claim's fleet, so one index finds a term's claims within a fleet
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="+",
                              db_index=False, db_constraint=False)
    term = models.CharField(max_length=bm25.MAX_TERM_CHARS)
    text_count = models.PositiveIntegerField()
    subject_count = models.PositiveIntegerField()
    # Copies of the claim's own columns, so BM25 counts and scores a term's doclist without
    # visiting a claim per match (a lookup per match was most of a search's lexical time at
    # 10k claims: docs/search.md). Written with the row by claims.lexicon; kept equal to the
    # claim's afterwards by the trigger `claims_term_follows_claim` (migration 0011), in
    # the transaction that changes the claim, whichever code path updates it.
    status = models.CharField(max_length=10)  # Claim.status: the collection is by status
    number = models.PositiveIntegerField()  # Claim.number: equal scores break by it
    length = models.PositiveIntegerField()  # Claim.lexical_length: BM25's |d|

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("claim", "term"), name="claims_term_once_per_claim"),
        ]
        indexes = [
            # covering: a term's doclist within a fleet, with all BM25 reads of each
            # match, is an index-only scan
            models.Index(fields=("fleet", "term"), include=("claim", "text_count",
                                                          "subject_count", "status",
                                                          "number", "length"),
                         name="claims_term_doclist"),
        ]

    def __str__(self) -> str:
        return f"{self.term} in claim {self.claim_id}"


class Evidence(Screened):
    """One citation: the session and message where the fleet observed what the claim says."""

    SCREENED_FIELDS = ("excerpt",)

    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="evidence")
    session_id = models.CharField(max_length=ev.ID_MAX_CHARS)
    message_id = models.CharField(max_length=ev.ID_MAX_CHARS)
    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True)
    repo = models.CharField(max_length=ev.REPO_MAX_CHARS, blank=True)
    path = models.CharField(max_length=ev.PATH_MAX_CHARS, blank=True)
    commit = models.CharField(max_length=ev.COMMIT_MAX_CHARS, blank=True)
    excerpt = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = CopyInsertQuerySet["Evidence"].as_manager()

    class Meta:
        ordering = ("claim_id", "created_at")
        verbose_name_plural = "evidence"
        constraints = [
            models.UniqueConstraint(
                fields=("claim", "session_id", "message_id"), name="claims_evidence_one_citation"
            ),
            models.CheckConstraint(
                condition=~Q(session_id__regex=r"^\s*$"), name="claims_evidence_session_not_blank"
            ),
            models.CheckConstraint(
                condition=~Q(message_id__regex=r"^\s*$"), name="claims_evidence_message_not_blank"
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("excerpt"), MAX_EXCERPT),
                name="claims_evidence_excerpt_short",
            ),
        ]
        indexes = [
            models.Index(fields=("path",), name="claims_evidence_by_path"),
            # Versioned citations by path prefix, for staleness (claims/staleness.py): a
            # LIKE 'prefix%' range scan whatever the database's collation.
            models.Index(
                OpClass(models.F("path"), name="text_pattern_ops"),
                condition=~Q(path="") & ~Q(commit=""),
                name="claims_evidence_versioned",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}/{self.message_id}"


class EventKind(models.TextChoices):
    PROPOSED = "proposed", "proposed"
    CORROBORATED = "corroborated", "corroborated"
    PROMOTED = "promoted", "promoted"
    REJECTED = "rejected", "rejected"
    CONTESTED = "contested", "contested"
    RETRACTED = "retracted", "retracted"
    EDITED = "edited", "edited"
    SUPERSEDED = "superseded", "superseded"
    VALID_UNTIL = "valid_until", "valid until set"
    CONFIDENCE = "confidence", "confidence set"
    SENT_BACK = "sent_back", "sent back for review"


class ClaimEvent(models.Model):
    """Append-only audit trail of a claim; a database trigger refuses UPDATE and DELETE."""

    Kind = EventKind

    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    actor_agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True)
    actor_token = models.ForeignKey(
        ApiToken,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        help_text="The operator REST token that acted, when it was not a person.",
    )
    note = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)

    objects = CopyInsertQuerySet["ClaimEvent"].as_manager()

    class Meta:
        ordering = ("claim_id", "at", "id")
        constraints = [in_choices("kind", EventKind, "claims_event_kind_valid")]
        indexes = [models.Index(fields=("claim", "at"), name="claims_event_by_claim")]

    def __str__(self) -> str:
        return f"{self.claim.public_id} {self.kind}"

    def save(self, *args: object, **kwargs: object) -> None:
        if self.pk is not None:
            raise TypeError("claim events are append-only; record a new event instead")
        super().save(*args, **kwargs)


class ClaimUse(models.Model):
    """One session's dealings with one claim: shown (by which doors, how often) and used
    (cited or acted on, as the session's capture found). The session's outcome, joined at
    tally time, closes the record (claims.usefulness)."""

    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="uses")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="claim_uses")
    served_count = models.PositiveIntegerField(default=0)
    via = models.JSONField(default=list, blank=True, help_text="The doors that showed it.")
    first_served_at = models.DateTimeField(null=True, blank=True)
    used = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("claim", "session"), name="claims_use_one_per_session"),
        ]
        indexes = [models.Index(fields=("session",), name="claims_use_by_session")]

    def __str__(self) -> str:
        return f"{self.claim.public_id} in {self.session.session_id}"


FeedbackVerdict = contract_choices("FeedbackVerdict", ev.FEEDBACK_VERDICTS)


class FeedbackResolution(models.TextChoices):
    OPEN = "", "open"
    DISMISSED = "dismissed", "dismissed"
    ACTED = "acted", "acted on"


class ClaimFeedback(Screened):
    """An agent's word on a claim (memory_feedback): a task for a moderator, never a change
    to the claim. Open wrong/outdated feedback lowers the claim's confidence, bounded
    (mcp_bridge.contract.usefulness); resolving it restores it."""

    SCREENED_FIELDS = ("note",)

    Verdict = FeedbackVerdict
    Resolution = FeedbackResolution
    #: The verdicts that count against a claim while open.
    AGAINST = ("wrong", "outdated")

    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="feedback")
    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True)
    session = models.ForeignKey(Session, on_delete=models.SET_NULL, null=True, blank=True)
    verdict = models.CharField(max_length=16, choices=FeedbackVerdict.choices)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    resolution = models.CharField(
        max_length=10, blank=True, default="", choices=FeedbackResolution.choices
    )
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        verbose_name_plural = "claim feedback"
        constraints = [
            in_choices("verdict", FeedbackVerdict, "claims_feedback_verdict_valid"),
            in_choices("resolution", FeedbackResolution, "claims_feedback_resolution_valid"),
            models.CheckConstraint(
                condition=Q(resolution="") | Q(resolved_at__isnull=False),
                name="claims_feedback_resolved_has_time",
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("note"), ev.FEEDBACK_NOTE_MAX_CHARS),
                name="claims_feedback_note_short",
            ),
        ]
        indexes = [
            models.Index(fields=("claim", "resolution"), name="claims_feedback_open"),
        ]

    def __str__(self) -> str:
        who = self.agent.agent_id if self.agent else "an agent"
        return f"{who} says {self.claim.public_id} is {self.verdict}"


class Contradiction(models.Model):
    """Two promoted claims the conflict rules (claims.conflicts) read as saying opposite
    things: marked to agents ("CONFLICTS WITH cc-14") until a person resolves the pair
    (contests, retracts or supersedes one, or says they do not conflict)."""

    claim = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="+")
    other = models.ForeignKey(Claim, on_delete=models.CASCADE, related_name="+")
    similarity = models.FloatField()
    reasons = models.JSONField(default=list, blank=True)
    found_at = models.DateTimeField(default=timezone.now)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("claim", "other"), name="claims_contradiction_pair"),
            # one row per pair: the lower id first
            models.CheckConstraint(
                condition=Q(claim__lt=models.F("other")), name="claims_contradiction_ordered"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.claim.public_id} conflicts with {self.other.public_id}"


class SnapshotChange(models.Model):
    """One change that may alter a fleet's snapshot.sqlite: a claim (its row, evidence,
    events or contradictions), a session whose outcome the timeline shows, or `full` (a
    rename of a person or agent the timeline names).

    Written only by database triggers (migration 0012), never by Python: every writer of
    these tables, present and future, the admin and raw SQL included, is covered without
    remembering to. `xid` is the writing transaction's id (pg_current_xact_id), which is
    what lets a render ask "what committed since my last snapshot" without a gap
    (claims.snapshot_changes). Not a foreign key to the fleet: a fleet's deletion fires
    these triggers too.
    """

    fleet_id = models.BigIntegerField()
    claim_id = models.BigIntegerField(null=True)
    number = models.PositiveIntegerField(null=True, help_text="Set when the claim row changed.")
    session_id = models.CharField(max_length=ev.ID_MAX_CHARS, blank=True, default="")
    full_render = models.BooleanField(default=False)
    xid = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=("fleet_id", "xid"), name="claims_change_by_xid")]

    def __str__(self) -> str:
        return f"fleet {self.fleet_id} claim {self.claim_id} xid {self.xid}"
