"""Coordination: who is in a fleet, what they are doing, what they hold, what they hand over.

Rules that must hold whatever code writes the rows (enumerations, non-empty identifiers,
one live lease per agent and path) are database constraints, not only form validation.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, NamedTuple, cast

from django.conf import settings
from django.contrib.postgres.indexes import OpClass
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, URLValidator
from django.db import connection, models
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.deconstruct import deconstructible

from fleet.constraints import contract_choices, in_choices, not_blank
from fleet.copy_insert import CopyInsertQuerySet
from fleet.globs import BadPath, literal_prefix
from mcp_bridge import contract
from mcp_bridge.contract import events as ev
from mcp_bridge.contract import screen


class MemoryMode(models.TextChoices):
    OFF = "off", "off: no snapshot, search disabled"
    SHADOW = "shadow", "shadow: snapshot rendered, nothing agent-visible"
    LIVE = "live", "live: promoted claims visible to agents"


class CaptureMode(models.TextChoices):
    """What an agent's session-end capture does for this fleet (docs/capture.md)."""

    OFF = contract.CAPTURE_OFF, "off: the transcript is not read; a bare session record"
    CANDIDATES = contract.CAPTURE_CANDIDATES, (
        "candidates: the session record and deterministic candidate claims")
    LLM = contract.CAPTURE_LLM, (
        "candidates+LLM: also an LLM's candidates, where the agent's host has an API key")


class Retention(NamedTuple):
    """How long a fleet keeps one kind of row: the one definition of its default age.

    `field` is the Fleet column holding the age in days; 0 keeps the rows for good. A
    non-zero age is at least `min_days`: the rows that make a replayed event a no-op
    (AppliedEvent, the `spool.received` receipts among Activity) must outlive any replay.
    Claim events are not here: they are the audit trail and are never pruned.
    """

    field: str
    default_days: int
    min_days: int
    what: str


RETAIN_MAX_DAYS = 36_500  # a hundred years: a bound, so no age overflows a date
RETAIN_ACTIVITY = Retention(
    "retain_activity_days", 365, 7,
    "Activity rows (the coordination log, and the receipts of relayed spool lines)")
RETAIN_APPLIED = Retention(
    "retain_applied_events_days", 90, 7,
    "AppliedEvent rows (which spool events and API writes were applied, for replays)")
RETAIN_DEAD = Retention(
    "retain_dead_letters_days", 90, 1,
    "DeadLetter rows (spool lines the drain refused, with the reason)")
RETAIN_TRANSCRIPT = Retention(
    "retain_transcripts_days", 180, 1,
    "what sessions took from transcripts: summary, changed paths, withheld candidates "
    "(the session row, its id, repo, branch and outcome stay: evidence cites them)")
RETENTION = (RETAIN_ACTIVITY, RETAIN_APPLIED, RETAIN_DEAD, RETAIN_TRANSCRIPT)
#: Hours without a write after which an agent is retired (fleet.retirement); 0: never.
RETIRE_IDLE_HOURS_DEFAULT = 24
RETIRE_IDLE_HOURS_MAX = 24 * 365
#: Only these schemes reach a webhook: never file:, ftp: or anything urllib might open.
WEBHOOK_SCHEMES = ("http", "https")
WEBHOOK_URL_MAX_CHARS = 500
WEBHOOK_SECRET_MAX_CHARS = 128


def storable_line(value: str) -> None:
    """A validator for a one-line setting: the contract's check (no NUL, no lone
    surrogate, printable), run before any other validator or constraint sends the value
    to Postgres, which cannot even compare such text."""
    problem = ev.text_problem(value, "the value", 10_000, required=False, one_line=True)
    if problem:
        raise ValidationError(problem[0].upper() + problem[1:] + ".", code="text")


def _days_field(rule: Retention) -> models.PositiveIntegerField[int, int]:
    return models.PositiveIntegerField(
        default=rule.default_days,
        validators=[RetentionDays(rule.field)],
        help_text=f"Days to keep {rule.what}; 0 keeps them for good, else "
        f"{rule.min_days}–{RETAIN_MAX_DAYS}. Applied by manage.py maintain_db.",
    )


def retention_problem(rule: Retention, days: int) -> str | None:
    """Why `days` is not an age this rule accepts, or None (the form's, command's and
    database's one rule: the check constraint below says the same)."""
    if days == 0 or rule.min_days <= days <= RETAIN_MAX_DAYS:
        return None
    return f"0 (keep for good) or {rule.min_days}–{RETAIN_MAX_DAYS} days"


@deconstructible
class RetentionDays:
    """The form's validator for one rule's age (named by its field, so migrations can
    name it); the check constraint below holds the database to the same rule."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __call__(self, value: int) -> None:
        rule = next(r for r in RETENTION if r.field == self.field)
        problem = retention_problem(rule, value)
        if problem:
            raise ValidationError(f"Must be {problem}.", code="retention")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RetentionDays) and other.field == self.field

    def __hash__(self) -> int:
        return hash(self.field)


def _retention_constraint(rule: Retention) -> models.CheckConstraint:
    return models.CheckConstraint(
        condition=Q(**{rule.field: 0})
        | Q(**{f"{rule.field}__range": (rule.min_days, RETAIN_MAX_DAYS)}),
        name=f"fleet_{rule.field}_valid",
    )


class Fleet(models.Model):
    MemoryMode = MemoryMode
    CaptureMode = CaptureMode

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    memory_mode = models.CharField(
        max_length=8, choices=MemoryMode.choices, default=MemoryMode.SHADOW
    )
    capture_mode = models.CharField(
        max_length=16, choices=CaptureMode.choices, default=CaptureMode.CANDIDATES,
        help_text="What agents' session-end capture proposes from their transcripts. Every "
        "candidate is only proposed: a moderator promotes it.",
    )
    capture_max_candidates = models.PositiveSmallIntegerField(
        default=contract.CAPTURE_MAX_DEFAULT,
        validators=[MaxValueValidator(contract.CAPTURE_MAX_LIMIT)],
        help_text="At most this many candidates a session's capture proposes (best first; "
        f"0 to {contract.CAPTURE_MAX_LIMIT}). A short queue of good proposals gets read.",
    )
    default_lease_ttl_secs = models.PositiveIntegerField(
        default=ev.TTL_DEFAULT_SECS,  # the one default: a claim naming no TTL gets the fleet's
        validators=[MinValueValidator(ev.TTL_MIN_SECS), MaxValueValidator(ev.TTL_MAX_SECS)],
        help_text=f"Seconds a lease lasts when its claim names no TTL "
                  f"({ev.TTL_MIN_SECS}–{ev.TTL_MAX_SECS}, the limits every door applies).",
    )
    min_independent_sessions = models.PositiveSmallIntegerField(
        default=1, help_text="Independent sessions a claim needs before it can be promoted."
    )
    repo_url_template = models.CharField(
        max_length=500,
        blank=True,
        help_text=(
            "Where a cited file can be read, e.g. https://github.com/acme/{repo}/blob/{commit}/"
            "{path}; {repo}, {path} and {commit} are filled in. Blank: citations are not linked."
        ),
    )
    retain_activity_days = _days_field(RETAIN_ACTIVITY)
    retain_applied_events_days = _days_field(RETAIN_APPLIED)
    retain_dead_letters_days = _days_field(RETAIN_DEAD)
    retain_transcripts_days = _days_field(RETAIN_TRANSCRIPT)
    retire_idle_hours = models.PositiveIntegerField(
        default=RETIRE_IDLE_HOURS_DEFAULT,
        validators=[MaxValueValidator(RETIRE_IDLE_HOURS_MAX)],
        help_text="An agent not seen for this many hours is retired: its leases are "
                  "released and the roster stops listing it, until its next write. 0: never.",
    )
    incident_webhook_url = models.CharField(
        max_length=WEBHOOK_URL_MAX_CHARS, blank=True,
        validators=[storable_line, URLValidator(schemes=list(WEBHOOK_SCHEMES))],
        help_text="Where each incident is POSTed as JSON, signed with the secret below "
                  "(X-Ctxlake-Signature: sha256=<hex HMAC of the body>). http(s) only. "
                  "Blank: no webhook.",
    )
    incident_webhook_secret = models.CharField(
        max_length=WEBHOOK_SECRET_MAX_CHARS, blank=True, validators=[storable_line],
        help_text="The HMAC-SHA256 key the receiver checks the signature with; required "
                  "with a webhook URL.",
    )
    # Per-fleet counter behind claims' short public ids (cc-01, cc-02, …).
    claim_seq = models.PositiveIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ("slug",)
        constraints = [
            in_choices("memory_mode", MemoryMode, "fleet_memory_mode_valid"),
            in_choices("capture_mode", CaptureMode, "fleet_capture_mode_valid"),
            not_blank("slug", "fleet_slug_not_blank"),
            models.CheckConstraint(
                condition=Q(default_lease_ttl_secs__range=(ev.TTL_MIN_SECS, ev.TTL_MAX_SECS)),
                name="fleet_lease_ttl_in_range",
            ),
            models.CheckConstraint(
                condition=Q(min_independent_sessions__gte=1), name="fleet_min_sessions_positive"
            ),
            *(_retention_constraint(rule) for rule in RETENTION),
            models.CheckConstraint(condition=Q(retire_idle_hours__lte=RETIRE_IDLE_HOURS_MAX),
                                   name="fleet_retire_idle_hours_in_range"),
            # the form's validator says more; the database holds every writer to the scheme
            models.CheckConstraint(
                condition=Q(incident_webhook_url="")
                | (Q(incident_webhook_url__iregex=r"^https?://[^\s]+$")
                   & ~Q(incident_webhook_secret="")),
                name="fleet_incident_webhook_http_with_secret",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        """A webhook URL needs a secret: an unsigned incident could be forged by anyone."""
        super().clean()
        if self.incident_webhook_url and not self.incident_webhook_secret:
            raise ValidationError({"incident_webhook_secret": "Required with a webhook URL."})


def take_claim_numbers(fleet_id: int, count: int = 1) -> int:
    """Take the fleet's next `count` claim numbers in one statement; returns the last.

    The fleet's row holds its claim counter (claims are numbered per fleet: cc-1, cc-2 …);
    the row lock serialises takers until their transaction ends.
    """
    table = connection.ops.quote_name(Fleet._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {table} SET claim_seq = claim_seq + %s WHERE id = %s RETURNING claim_seq",
            [count, fleet_id],
        )
        return int(cur.fetchone()[0])


class Agent(models.Model):
    """One agent identity in a fleet (what CTXLAKE_AGENT_ID names on the bridge)."""

    #: An agent seen this recently counts as active (so does one holding a live lease).
    ACTIVE_WINDOW = timedelta(hours=1)

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="agents")
    agent_id = models.CharField(max_length=ev.ID_MAX_CHARS)
    runtime = models.CharField(max_length=64, blank=True, help_text="claude-code, cursor, codex…")
    host = models.CharField(max_length=255, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(
        null=True, blank=True, editable=False,
        help_text="Set when the fleet retired it for being idle; cleared by its next write.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ("fleet_id", "agent_id")
        constraints = [
            models.UniqueConstraint(fields=("fleet", "agent_id"), name="fleet_agent_unique_id"),
            not_blank("agent_id", "fleet_agent_id_not_blank"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_id}@{self.fleet.slug}"

    @classmethod
    def active(cls, now: datetime, holders: Iterable[int] | QuerySet[Any]) -> Q:
        """The one rule for an active agent, as a filter: it holds a live lease (`holders`:
        those agents' pks, or a subquery of them) or was seen within ACTIVE_WINDOW. The
        rendered roster, REST `status` and the team page all list agents by it."""
        return Q(last_seen_at__gte=now - cls.ACTIVE_WINDOW) | Q(pk__in=holders)


class Screened(models.Model):
    """A row holding text one agent wrote for others, with the instruction screen's verdict.

    `screen_flags` is {field: spans} for each field of SCREENED_FIELDS the screen flagged
    when the text arrived (mcp_bridge.contract.screen, the same check at every door); the
    renderers show such a field to agents as screen.withheld(author) until a person
    releases it (fleet.screening.release_text, audited). Set by `screen_text_fields()` in
    the domain action that writes the text, never by a form or a signal.
    """

    SCREENED_FIELDS: tuple[str, ...] = ()
    #: The foreign key to the agent who wrote the text (named in the withheld marker).
    SCREEN_AUTHOR = "agent"
    #: The columns holding the screen's verdict (what `text_shown` reads beside the text).
    SCREEN_VERDICT = ("screen_flags", "screen_released_at")

    screen_flags = models.JSONField(
        default=dict, blank=True, editable=False,
        help_text="Instruction-like spans per field, found at ingest: {field: [spans]}.",
    )
    screen_released_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+", editable=False,
    )
    screen_released_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True

    def screen_text_fields(self) -> dict[str, list[dict[str, Any]]]:
        """Screen this row's text fields as they are now; a new verdict needs a new release."""
        self.screen_flags = screen.screen_fields(
            {name: getattr(self, name) for name in self.SCREENED_FIELDS}
        )
        self.screen_released_by = None
        self.screen_released_at = None
        return cast("dict[str, list[dict[str, Any]]]", self.screen_flags)  # a JSONField: Any

    @property
    def screen_pending(self) -> bool:
        """Flagged and not yet released: what agents must not see."""
        return bool(self.screen_flags) and self.screen_released_at is None

    def withholds(self, field: str) -> bool:
        return self.withheld(self.screen_flags, self.screen_released_at, field)

    @staticmethod
    def withheld(flags: dict[str, Any], released_at: datetime | None, field: str) -> bool:
        """The rule, for rows read as values (the renders) as for instances."""
        return field in flags and released_at is None

    @classmethod
    def text_shown(cls, row: dict[str, Any], field: str, author: str | None) -> str:
        """`for_agents` for a row read as values (`row` holds `field` and the verdict's
        columns, SCREEN_VERDICT): the renders read hundreds of rows as values, where model
        instances cost them four times as much."""
        return cls.shown(row[field], row["screen_flags"], row["screen_released_at"], field,
                         author)

    @classmethod
    def shown(cls, text: str, flags: dict[str, Any], released_at: datetime | None, field: str,
              author: str | None) -> str:
        """`text_shown` for a text whose verdict was read beside it (the roster's lease rows,
        read as tuples)."""
        return screen.withheld(author) if cls.withheld(flags, released_at, field) else text

    def for_agents(self, field: str) -> str:
        """The field as other agents may see it: the text, or the withheld marker naming
        its author (looked up only then, so a render of clean rows costs no query)."""
        if not self.withholds(field):
            return cast(str, getattr(self, field))
        author = getattr(self, self.SCREEN_AUTHOR)
        return screen.withheld(author.agent_id if author is not None else None)


SessionOutcome = contract_choices("SessionOutcome", ev.SESSION_OUTCOMES, blank="unknown")


class Session(Screened):
    Outcome = SessionOutcome
    SCREENED_FIELDS = ("summary",)

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="sessions")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    session_id = models.CharField(max_length=ev.ID_MAX_CHARS)
    repo = models.CharField(max_length=ev.REPO_MAX_CHARS, blank=True)
    branch = models.CharField(max_length=ev.BRANCH_MAX_CHARS, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, blank=True, default="")
    summary = models.TextField(blank=True)
    changed_paths = models.JSONField(
        default=list, blank=True, help_text="Paths the session said it changed (session.end)."
    )
    capture_withheld = models.JSONField(
        default=list, blank=True, editable=False,
        help_text="Capture candidates the instruction screen held back: "
        "[{extractor, text, spans}]; never proposed, shown to moderators only.",
    )
    # When the server first and last saw an event of this session (fleet.sessions).
    first_seen_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-started_at",)
        constraints = [
            models.UniqueConstraint(fields=("fleet", "session_id"), name="fleet_session_unique_id"),
            not_blank("session_id", "fleet_session_id_not_blank"),
            in_choices("outcome", SessionOutcome, "fleet_session_outcome_valid"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=models.F("started_at")),
                name="fleet_session_ends_after_start",
            ),
        ]
        indexes = [models.Index(fields=("fleet", "-started_at"), name="fleet_session_recent")]

    def __str__(self) -> str:
        return self.session_id


class LeaseQuerySet(models.QuerySet["Lease"]):
    def active(self, *, at: datetime | None = None) -> LeaseQuerySet:
        return self.filter(released_at__isnull=True, expires_at__gt=at or timezone.now())

    def expired(self, *, at: datetime | None = None) -> LeaseQuerySet:
        """Unreleased leases whose TTL has run out: still rows, no longer held."""
        return self.filter(released_at__isnull=True, expires_at__lte=at or timezone.now())


class Lease(Screened):
    """An advisory hold on a path or glob. Advisory: overlapping holders are told, not refused."""

    SCREENED_FIELDS = ("reason",)

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="leases")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="leases")
    session = models.ForeignKey(
        Session, on_delete=models.SET_NULL, null=True, blank=True, related_name="leases"
    )
    path = models.CharField(max_length=ev.PATH_MAX_CHARS, help_text="A repo-relative path or glob.")
    # fleet.globs.literal_prefix(path): lets contention checks skip leases that cannot overlap.
    prefix = models.CharField(max_length=1100, blank=True, default="", editable=False)
    reason = models.CharField(max_length=ev.REASON_MAX_CHARS, blank=True)
    acquired_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)
    offered_with = models.ForeignKey(
        "Handoff",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="offered_leases",
        help_text="Offered to whoever picks this handoff up; moves to them on pickup.",
    )

    objects = LeaseQuerySet.as_manager()

    class Meta:
        ordering = ("fleet_id", "path")
        constraints = [
            # A replayed claim renews the live lease instead of adding a second one.
            models.UniqueConstraint(
                fields=("fleet", "agent", "path"),
                condition=Q(released_at__isnull=True),
                name="fleet_lease_one_per_key",
            ),
            not_blank("path", "fleet_lease_path_not_blank"),
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("acquired_at")),
                name="fleet_lease_expires_after_acquired",
            ),
            models.CheckConstraint(
                condition=Q(released_at__isnull=True) | Q(released_at__gte=models.F("acquired_at")),
                name="fleet_lease_released_after_acquired",
            ),
        ]
        indexes = [
            models.Index(
                fields=("fleet", "expires_at"),
                condition=Q(released_at__isnull=True),
                name="fleet_lease_live_by_expiry",
            ),
            models.Index(
                models.F("fleet"),
                OpClass(models.F("prefix"), name="text_pattern_ops"),
                condition=Q(released_at__isnull=True),
                name="fleet_lease_live_by_prefix",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.path} ({self.agent.agent_id})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        try:
            self.prefix = literal_prefix(self.path)
        except BadPath:
            self.prefix = ""  # the database's own checks have the last word on the path
        super().save(*args, **kwargs)

    def is_active(self, at: datetime | None = None) -> bool:
        return self.released_at is None and self.expires_at > (at or timezone.now())


# Any: its members (Status.IN_PROGRESS) are made at run time, unknown to mypy.
HandoffStatus: Any = contract_choices("HandoffStatus", ev.HANDOFF_STATUSES)


class SourceTrust(models.TextChoices):
    OPERATOR = "operator", "operator"
    AGENT = "agent", "agent"
    INGESTED = "ingested", "ingested"


class HandoffState(models.TextChoices):
    PENDING = "pending", "pending"
    PICKED_UP = "picked_up", "picked up"
    CLEARED = "cleared", "cleared"


class Handoff(Screened):
    """A note left for whoever picks the work up next; versioned for compare-and-swap."""

    SCREENED_FIELDS = ("summary", "next_steps")
    SCREEN_AUTHOR = "from_agent"

    Status = HandoffStatus

    SourceTrust = SourceTrust

    State = HandoffState

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="handoffs")
    from_agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="handoffs_sent")
    from_session = models.ForeignKey(
        Session, on_delete=models.SET_NULL, null=True, blank=True, related_name="handoffs_sent"
    )
    summary = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.IN_PROGRESS)
    next_steps = models.TextField(blank=True)
    source_trust = models.CharField(
        max_length=10, choices=SourceTrust.choices, default=SourceTrust.AGENT
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    picked_up_by = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="handoffs_taken"
    )
    picked_up_session = models.ForeignKey(
        Session, on_delete=models.SET_NULL, null=True, blank=True, related_name="handoffs_taken"
    )
    picked_up_at = models.DateTimeField(null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    updated_at = models.DateTimeField(default=timezone.now)
    #: Not a column: set only on the handoff pick_up_handoff returns (the leases that moved).
    transferred_paths: list[str]

    objects = CopyInsertQuerySet["Handoff"].as_manager()

    class Meta:
        ordering = ("-created_at",)
        constraints = [
            in_choices("status", HandoffStatus, "fleet_handoff_status_valid"),
            in_choices("source_trust", SourceTrust, "fleet_handoff_trust_valid"),
            in_choices("state", HandoffState, "fleet_handoff_state_valid"),
            not_blank("summary", "fleet_handoff_summary_not_blank"),
            models.CheckConstraint(
                condition=~Q(state="picked_up") | Q(picked_up_at__isnull=False),
                name="fleet_handoff_pickup_has_time",
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="fleet_handoff_version_ge_1"),
        ]
        indexes = [
            models.Index(
                fields=("fleet", "-created_at"),
                condition=Q(state="pending"),
                name="fleet_handoff_open",
            )
        ]

    def __str__(self) -> str:
        return f"handoff #{self.pk} from {self.from_agent.agent_id} ({self.state})"


class Activity(models.Model):
    """The fleet's append-only activity log: one row per state change, with its actor."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="activity")
    verb = models.CharField(max_length=64, help_text='Dotted, e.g. "lease.claimed".')
    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("-at",)
        verbose_name_plural = "activity"
        constraints = [not_blank("verb", "fleet_activity_verb_not_blank")]
        indexes = [
            models.Index(fields=("fleet", "-at"), name="fleet_activity_recent"),
            models.Index(fields=("fleet", "verb", "target_id"), name="fleet_activity_by_target"),
        ]

    def __str__(self) -> str:
        return f"{self.verb} at {self.at:%Y-%m-%d %H:%M}"


IncidentKind: Any = contract_choices("IncidentKind", ev.INCIDENT_KINDS)


class Incident(models.Model):
    """Something one agent did to another's work, kept and told to the other (the holder).

    Written only by fleet.incidents.record_incident (one transaction with its Activity row
    and a render request); the holder's bridge shows it once in its next tool answer, the
    roster and briefing list it for a day, and the fleet's webhook (if any) receives it.
    `key` makes a source that may run twice (the overlap scan) record once.
    """

    Kind = IncidentKind

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="incidents")
    kind = models.CharField(max_length=32, choices=Kind.choices)
    paths = models.JSONField(default=list, blank=True)
    actor = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="incidents_caused")
    actor_session = models.CharField(max_length=ev.ID_MAX_CHARS, blank=True)
    holder = models.ForeignKey(Agent, on_delete=models.CASCADE, null=True, blank=True,
                               related_name="incidents_suffered")
    holder_session = models.CharField(max_length=ev.ID_MAX_CHARS, blank=True)
    detail = models.CharField(max_length=ev.INCIDENT_DETAIL_MAX_CHARS, blank=True)
    key = models.CharField(max_length=200, blank=True, editable=False,
                           help_text="Set by a source that may see one incident twice.")
    at = models.DateTimeField(default=timezone.now)
    told_at = models.DateTimeField(
        null=True, blank=True, help_text="When the holder's bridge first showed it (its "
        "incident.told spool event); empty until then, or for an incident with no holder.")
    webhook_attempts = models.PositiveSmallIntegerField(default=0)
    webhook_next_at = models.DateTimeField(
        null=True, blank=True, help_text="When the next delivery attempt is due; empty when "
        "delivered, given up, or the fleet has no webhook.")
    webhook_delivered_at = models.DateTimeField(null=True, blank=True)
    webhook_last_error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ("-at", "-id")
        constraints = [
            in_choices("kind", IncidentKind, "fleet_incident_kind_valid"),
            models.UniqueConstraint(fields=("fleet", "key"), condition=~Q(key=""),
                                    name="fleet_incident_once_per_key"),
            models.CheckConstraint(condition=~Q(holder=models.F("actor")),
                                   name="fleet_incident_holder_not_actor"),
            models.CheckConstraint(condition=Q(webhook_attempts__lte=20),
                                   name="fleet_incident_webhook_attempts_bounded"),
        ]
        indexes = [
            models.Index(fields=("fleet", "-at"), name="fleet_incident_recent"),
            models.Index(fields=("webhook_next_at",), condition=Q(webhook_next_at__isnull=False),
                         name="fleet_incident_webhook_due"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor_id} at {self.at:%Y-%m-%d %H:%M}"


class FleetModerator(models.Model):
    """Grants one person moderation of one fleet; the admin shows them nothing else."""

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="moderators")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="moderated_fleets"
    )
    granted_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("fleet_id", "user_id")
        constraints = [
            models.UniqueConstraint(fields=("fleet", "user"), name="fleet_moderator_once")
        ]

    def __str__(self) -> str:
        return f"{self.user} moderates {self.fleet}"


class TokenRole(models.TextChoices):
    AGENT = "agent", "agent: coordination writes, propose, read"
    INTEGRATION = "integration", "integration: read, sessions, propose"
    HOST = "host", "host: relays its listed agents' spool lines, reads the cache to sync"
    OPERATOR = "operator", "operator: everything in the fleet, incl. moderation"


class ApiToken(models.Model):
    """A REST credential for one fleet and one role. Only a hash and a short prefix are kept.

    A `host` token is the one credential of a shared agent host: its `sync` relays the spool
    lines of several agents, each line naming its agent, and the server accepts a line only
    if that agent is in `relays_for`. The list is explicit, granted by an operator (admin or
    `issue_token --relay`), rather than "the agents whose `host` matches the token": an
    agent reports its own `host` in every heartbeat, so a match would let any agent (or the
    host token itself) enrol in a host by naming it, and an agent moving hosts would be
    relayed by both until someone noticed. An explicit list changes only when a person
    changes it, every change is an Activity row, and a revoked agent leaves it in one edit.
    """

    Role = TokenRole

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    role = models.CharField(max_length=12, choices=TokenRole.choices)
    agent = models.ForeignKey(
        Agent,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="The agent an agent-role token speaks for.",
    )
    relays_for = models.ManyToManyField(
        Agent,
        blank=True,
        related_name="relayed_by",
        help_text="A host token: the agents of this host whose spool lines it relays; a line "
        "naming any other agent is refused. Set by an operator, never by an agent.",
    )
    prefix = models.CharField(max_length=12, editable=False, help_text="Shown to identify it.")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("fleet_id", "name")
        constraints = [
            in_choices("role", TokenRole, "fleet_token_role_valid"),
            not_blank("name", "fleet_token_name_not_blank"),
            models.CheckConstraint(
                condition=Q(key_hash__regex=r"^[0-9a-f]{64}$"), name="fleet_token_hash_is_sha256"
            ),
            models.UniqueConstraint(
                fields=("fleet", "name"),
                condition=Q(revoked_at__isnull=True),
                name="fleet_token_live_name_unique",
            ),
            # a host token speaks for its listed agents, never as one bound agent
            models.CheckConstraint(
                condition=~Q(role=TokenRole.HOST) | Q(agent__isnull=True),
                name="fleet_token_host_has_no_agent",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.role}, {self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class AppliedEvent(models.Model):
    """A spool event that has been applied. The unique event id makes a replay a no-op."""

    event_id = models.UUIDField(unique=True)
    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="applied_events")
    kind = models.CharField(max_length=32)
    source = models.CharField(max_length=16, default="spool", help_text="spool or api")
    applied_at = models.DateTimeField(default=timezone.now)
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-applied_at",)
        indexes = [models.Index(fields=("fleet", "-applied_at"), name="fleet_applied_recent")]

    def __str__(self) -> str:
        return f"{self.kind} {self.event_id}"


class SpoolCursor(models.Model):
    """How far the drain has read one spool file.

    Keyed by (device, inode), not by path: the bridge rotates a full file by renaming it,
    and the rotated file must continue from where the drain stopped under its old name.
    """

    device = models.BigIntegerField()
    inode = models.BigIntegerField()
    path = models.CharField(max_length=1024, help_text="Where the file was last seen.")
    offset = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("device", "inode"), name="fleet_cursor_one_per_file"),
            models.CheckConstraint(condition=Q(offset__gte=0), name="fleet_cursor_offset_ge_0"),
        ]

    def __str__(self) -> str:
        return f"{self.path} @ {self.offset}"


class DeadLetter(models.Model):
    """A spool line the drain could not apply, and why: the record an operator reads.

    Recorded once: keyed by the cursor the line was read through (a SpoolCursor row id,
    never reused, unlike inodes) and its byte offset, and inserted in the same transaction
    that moves the cursor past it. The drain also appends it to
    `<spool>/dead/<fleet>.ndjson` after that commit, as a file to grep.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="dead_letters")
    file = models.CharField(max_length=255, help_text="The spool file's name when read.")
    cursor_key = models.BigIntegerField(help_text="The SpoolCursor row the line was read with.")
    offset = models.BigIntegerField()
    event_id = models.UUIDField(null=True, blank=True)
    reason = models.TextField()
    line = models.TextField(help_text="The line (bounded, secrets scrubbed).")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ("-created_at", "-id")
        constraints = [
            models.UniqueConstraint(fields=("cursor_key", "offset"), name="fleet_deadletter_once"),
        ]
        indexes = [models.Index(fields=("fleet", "-created_at"), name="fleet_deadletter_recent")]

    def __str__(self) -> str:
        return f"{self.file}@{self.offset}: {self.reason[:60]}"


class InboxEvent(models.Model):
    """A spool line received over REST and not yet applied: the server tier's spool.

    A web host keeps nothing it accepts on its own disk, where another host's drain would
    never see it: the line is a row here, written in the transaction that records its
    receipt. The drain claims a fleet's rows in order (FOR UPDATE SKIP LOCKED), applies
    them exactly like spool lines (AppliedEvent, DeadLetter) and deletes them in the same
    transaction, so a killed worker's rows are simply claimed again. One row per (fleet,
    event id): a retry, or the same line posted to a second web host, cannot double it.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="inbox")
    event_id = models.UUIDField()
    kind = models.CharField(max_length=32)
    line = models.BinaryField(help_text="The line as validated and scrubbed at receipt.")
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # event_id first: the upload also looks an id up across fleets
            models.UniqueConstraint(fields=("event_id", "fleet"), name="fleet_inbox_once"),
        ]
        indexes = [models.Index(fields=("fleet", "id"), name="fleet_inbox_in_order")]

    def __str__(self) -> str:
        return f"{self.kind} {self.event_id}"


class CacheArtifact(models.Model):
    """One rendered cache file's bytes, stored once per content (sha256) and fleet.

    Renders are kept in the database so that every web host serves the same latest render
    whichever worker host made it; the ETag is the content's hash, the same on every host.
    """

    class Place(models.TextChoices):
        """Where the body is: a row keeps being served from where it was written."""

        DATABASE = "db", "Postgres (body)"
        OBJECT_STORE = "store", "object store (CTXLAKE_S3_*)"

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="cache_artifacts")
    name = models.CharField(max_length=64)
    sha256 = models.CharField(max_length=64)
    size = models.BigIntegerField()
    body = models.BinaryField(help_text="Empty when the body is in the object store.")
    place = models.CharField(max_length=8, choices=Place.choices, default=Place.DATABASE)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=("fleet", "name", "sha256"), name="fleet_artifact_once_per_content"
            ),
        ]
        indexes = [models.Index(fields=("fleet", "name", "-id"), name="fleet_artifact_recent")]

    def __str__(self) -> str:
        return f"{self.name} {self.sha256[:12]}"

    @property
    def etag(self) -> str:
        return contract.etag_of(self.sha256)


class CacheHead(models.Model):
    """The latest render of one cache file of a fleet: what GET cache/<name> serves.

    Moved in the render's transaction, all names at once, so a reader sees the old set or
    the new set of files, never a mix.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="cache_heads")
    name = models.CharField(max_length=64)
    # RESTRICT, not PROTECT: an artifact a head points at is never pruned on its own, yet
    # deleting the fleet deletes both (PROTECT refused that: ProtectedError).
    artifact = models.ForeignKey(CacheArtifact, on_delete=models.RESTRICT, related_name="+")
    rendered_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("fleet", "name"), name="fleet_cachehead_one_per_name"),
        ]

    def __str__(self) -> str:
        return f"{self.fleet_id}/{self.name}"


class SnapshotDelta(models.Model):
    """One render of a fleet's snapshot.sqlite: its version, and the delta from the one before.

    Agent hosts apply the deltas since their version instead of downloading the whole
    snapshot (mcp_bridge.contract.delta). `index` (each row's hash) is kept on the newest
    row only: the next render diffs against it.
    """

    fleet = models.ForeignKey(Fleet, on_delete=models.CASCADE, related_name="snapshot_deltas")
    version = models.PositiveBigIntegerField()
    base = models.PositiveBigIntegerField(null=True, help_text="None: the first render.")
    body = models.BinaryField(default=b"", help_text="The delta from `base` (JSON).")
    digest = models.CharField(max_length=32)
    index = models.BinaryField(default=b"")
    created_at = models.DateTimeField(default=timezone.now)
    cursor = models.TextField(
        blank=True, default="",
        help_text="The Postgres snapshot (pg_snapshot) this render's claims were read at: "
        "the next render re-reads only what was not yet visible in it.",
    )
    chain = models.PositiveIntegerField(
        default=0, help_text="Renders applied as a delta since the last full rebuild."
    )
    meta = models.JSONField(default=dict, blank=True, help_text="The snapshot's meta table.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=("fleet", "version"), name="fleet_snapdelta_version"),
        ]

    def __str__(self) -> str:
        return f"{self.fleet_id} v{self.version}"
