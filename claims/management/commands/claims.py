"""`manage.py claims …`: the review queue for operators without a browser.

list / show / promote / reject / contest / retract / merge / supersede / valid-until, each
calling the same
claims.moderation function the admin calls, so the promotion gate is the same gate. A
claim is named by its public id (cc-NN) and its fleet, because public ids are per fleet.
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from datetime import datetime
from typing import Any, cast

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.timesince import timesince

from claims import moderation, tallies
from claims.models import Claim
from fleet import lineage
from fleet.models import Fleet
from fleet.reveal import reveal_plain

STATUSES = [*Claim.Status.values, "all"]


class Command(BaseCommand):
    help = (
        "List and moderate claims: list, show, promote, reject, contest, retract, merge, "
        "supersede, valid-until."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        listing = sub.add_parser("list", help="Claims by status, oldest first.")
        listing.add_argument("--status", choices=STATUSES, default="proposed")
        listing.add_argument("--fleet", help="Fleet slug; all fleets when omitted.")
        listing.add_argument("--json", action="store_true", help="One JSON array on stdout.")
        listing.add_argument("--limit", type=int, default=200)
        show = sub.add_parser("show", help="One claim, its evidence and the gate's verdict.")
        self._claim_args(show, actor=False)
        promote = sub.add_parser("promote", help="Promote through the gate.")
        self._claim_args(promote)
        promote.add_argument("--note", default="")
        reject = sub.add_parser("reject", help="Reject, with a reason.")
        self._claim_args(reject)
        reject.add_argument("--reason", required=True)
        for name in ("contest", "retract"):
            noted = sub.add_parser(name, help=f"{name.capitalize()}, with a note.")
            self._claim_args(noted)
            noted.add_argument("--note", required=True)
        recount = sub.add_parser(
            "recount",
            help="Recount every claim's independent sessions (verified sessions only); "
            "prints what changes, writes only with --commit.",
        )
        recount.add_argument("--fleet", help="Fleet slug; all fleets when omitted.")
        recount.add_argument("--commit", action="store_true")
        merge = sub.add_parser("merge", help="Merge a proposal into another claim (corroborate).")
        self._claim_args(merge)
        merge.add_argument("--into", required=True, help="The claim to corroborate (cc-NN).")
        supersede = sub.add_parser(
            "supersede", help="Replace a promoted claim by another (promoting it if proposed)."
        )
        self._claim_args(supersede)
        supersede.add_argument("--by", dest="by_claim", required=True, help="cc-NN")
        supersede.add_argument("--note", default="")
        until = sub.add_parser("valid-until", help="Set (ISO 8601 with zone) or clear (none).")
        self._claim_args(until)
        until.add_argument("until", help="e.g. 2027-01-31T00:00:00Z, or none")
        until.add_argument("--note", default="")

    def _claim_args(self, parser: ArgumentParser, *, actor: bool = True) -> None:
        parser.add_argument("claim_id", metavar="ID", help="The public id, e.g. cc-12.")
        parser.add_argument("--fleet", required=True, help="The claim's fleet (slug).")
        if actor:
            parser.add_argument("--as", dest="username", required=True, help="Acting user.")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        if action == "list":
            self.list_claims(options["status"], options["fleet"], options["json"], options["limit"])
            return
        if action == "recount":
            fleet = self.find_fleet(options["fleet"]) if options["fleet"] else None
            changed = moderation.recount_claims(fleet, commit=options["commit"])
            for claim, before, after in changed:
                self.stdout.write(
                    f"{claim.fleet.slug:<16} {claim.public_id:<8} {before} -> {after}"
                )
            verb = "recounted" if options["commit"] else "would change (use --commit)"
            self.stdout.write(f"{len(changed)} claim(s) {verb}")
            return
        claim = self.find_claim(options["claim_id"], options["fleet"])
        if action == "show":
            self.show(claim)
            return
        user = self.find_user(options["username"])
        try:
            done = self.decide(action, claim, user, options)
        except (moderation.GateRefused, moderation.AlreadyDecided) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(self.style.SUCCESS(f"{done.public_id} is now {self._state(done)}"))

    def decide(self, action: str, claim: Claim, user: Any, options: dict[str, Any]) -> Claim:
        if action == "promote":
            return moderation.promote_claim(claim, by=user, note=options["note"])
        if action == "reject":
            return moderation.reject_claim(claim, by=user, reason=options["reason"])
        if action == "contest":
            return moderation.contest_claim(claim, by=user, note=options["note"])
        if action == "merge":
            into = self.find_claim(options["into"], claim.fleet.slug)
            moderation.merge_claim(claim, into=into, by=user)
            claim.refresh_from_db()
            return claim
        if action == "supersede":
            new = self.find_claim(options["by_claim"], claim.fleet.slug)
            return moderation.supersede_claim(claim, by=user, new=new, note=options["note"])
        if action == "valid-until":
            until = self.parse_until(options["until"])
            return moderation.set_valid_until(claim, by=user, until=until, note=options["note"])
        return moderation.retract_claim(claim, by=user, note=options["note"])

    def parse_until(self, value: str) -> datetime | None:
        if value.strip().lower() in ("none", "never", ""):
            return None
        moment = parse_datetime(value.strip())
        if moment is None or timezone.is_naive(moment):
            raise CommandError(f"{value!r} is not an ISO 8601 time with a zone (or 'none').")
        return moment

    # Lookups ----------------------------------------------------------------------------

    def find_fleet(self, slug: str) -> Fleet:
        fleet = Fleet.objects.filter(slug=slug).first()
        if fleet is None:
            raise CommandError(f"No fleet {slug!r}.")
        return fleet

    def find_claim(self, public_id: str, fleet_slug: str) -> Claim:
        fleet = self.find_fleet(fleet_slug)
        claim = Claim.objects.for_fleet(fleet).by_public_id(public_id).first()
        if claim is None:
            raise CommandError(f"No claim {public_id!r} in fleet {fleet.slug!r}.")
        return claim

    def find_user(self, username: str) -> Any:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        return user

    # Output -----------------------------------------------------------------------------

    def list_claims(self, status: str, fleet_slug: str | None, as_json: bool, limit: int) -> None:
        claims = Claim.objects.select_related("fleet", "proposed_by").order_by("created_at", "pk")
        if status != "all":
            claims = claims.filter(status=status)
        if fleet_slug:
            claims = claims.for_fleet(self.find_fleet(fleet_slug))
        rows = [self._row(c) for c in claims[: max(limit, 0)]]
        if as_json:
            self.stdout.write(json.dumps(rows, indent=2))  # JSON escapes hidden code points
            return
        for r in rows:
            text = reveal_plain(r["text"][:80])
            self.stdout.write(
                f"{r['fleet']:<16} {r['id']:<8} {r['status']:<9} {r['type']:<10} "
                f"{r['independent_sessions']:>2}s  {r['waiting']:<14} {text}"
            )
        self.stdout.write(f"{len(rows)} claim(s)")

    def show(self, claim: Claim) -> None:
        row = self._row(claim)
        for key in ("id", "fleet", "status", "type", "subject", "independent_sessions", "text"):
            self.stdout.write(f"{key}: {reveal_plain(str(row[key]))}")
        if claim.near_relation and claim.near_claim_id:
            label = (
                "possible conflict with"
                if claim.near_relation == "conflict"
                else ("likely duplicate of")
            )
            self.stdout.write(
                f"near: {label} {cast(Claim, claim.near_claim).public_id} "
                f"({claim.near_similarity:.2f})"
            )
        cited = list(claim.evidence.all())
        verified = lineage.verified_sessions(claim.fleet, [e.session_id for e in cited])
        for e in cited:
            cite = f"{e.session_id}/{e.message_id} {e.repo} {e.path} {e.commit}".rstrip()
            mark = "verified" if e.session_id in verified else "UNVERIFIED"
            self.stdout.write(f"  evidence [{mark}] {reveal_plain(cite)}")
            if e.excerpt:
                self.stdout.write(f"    {reveal_plain(e.excerpt)}")
        problems = moderation.gate_problems(claim)
        self.stdout.write("gate: " + ("; ".join(problems) if problems else "open"))
        self.stdout.write(
            f"usefulness: served {claim.served_sessions}, used {claim.used_sessions} "
            f"({claim.used_succeeded} succeeded, {claim.used_partial} partial, "
            f"{claim.used_failed} failed), open flags {claim.open_flags}; confidence "
            f"{claim.confidence:.2f}" + (" (set by a moderator)" if claim.confidence_set
                                          is not None else "")
            + f": {tallies.why(claim)}")

    def _row(self, claim: Claim) -> dict[str, Any]:
        return {
            "id": claim.public_id,
            "fleet": claim.fleet.slug,
            "status": claim.status,
            "contested": claim.contested,
            "type": claim.type,
            "subject": claim.subject,
            "independent_sessions": claim.independent_sessions,
            "proposed_by": claim.proposed_by.agent_id if claim.proposed_by else None,
            "created_at": claim.created_at.isoformat(),
            "waiting": timesince(claim.created_at, timezone.now()).split(",")[0],
            "text": claim.text,
        }

    def _state(self, claim: Claim) -> str:
        extra = " (contested)" if claim.contested else ""
        if claim.superseded_by_id:
            extra += f" (superseded by {cast(Claim, claim.superseded_by).public_id})"
        if claim.valid_until:
            extra += f" (valid until {claim.valid_until.isoformat()})"
        return f"{claim.status}{extra}"
