"""A fleet with one of everything an export carries, and helpers to export, tamper, import.

`build_world` makes claims in every status (proposed, promoted, contested, rejected,
retracted, superseded), evidence with every citation field, their events by agents and a
moderator, sessions (one ended), and handoffs (one pending, one picked up).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from claims import moderation
from claims.models import Claim
from ctxlake_site.fleet_export import archive
from fleet import handoffs
from fleet.models import Agent, Fleet, FleetModerator, Handoff, Session


def cite(session: str, message: str, **more: str) -> dict[str, str]:
    return {"session_id": session, "message_id": message, **more}


def _propose(fleet: Fleet, agent: Agent, text: str, *cites: dict[str, str]) -> Claim:
    return moderation.propose_claim(fleet, text=text, type="gotcha", subject="payments tests",
                                    evidence=list(cites), by_agent=agent).claim


def build_world(fleet: Fleet, ada: Agent, bo: Agent, mod: User) -> dict[str, Claim]:
    FleetModerator.objects.create(fleet=fleet, user=mod)
    now = timezone.now()
    s1 = Session.objects.create(fleet=fleet, agent=ada, session_id="s-1", repo="acme/shop",
                                branch="main", summary="fixed the refund flow",
                                outcome="success", changed_paths=["src/refund.py"],
                                started_at=now, ended_at=now, first_seen_at=now,
                                last_seen_at=now)
    Session.objects.create(fleet=fleet, agent=bo, session_id="s-2", started_at=now)
    claims = {
        "proposed": _propose(fleet, ada, "Run migrations before the refund tests.",
                             cite("s-1", "m-1", repo="acme/shop", path="src/refund.py",
                                  commit="abc123", excerpt="relation does not exist")),
        "promoted": _propose(fleet, ada, "The payments tests need STRIPE_API_BASE set.",
                             cite("s-1", "m-2"), cite("s-2", "m-1")),
        "rejected": _propose(fleet, bo, "The tests are flaky on Fridays.", cite("s-2", "m-2")),
        "retracted": _propose(fleet, bo, "Use Python 3.10 for the shop.", cite("s-2", "m-3")),
        "old": _propose(fleet, ada, "Webhooks retry 3 times.", cite("s-1", "m-3")),
        "new": _propose(fleet, ada, "Webhooks retry 5 times since v2.", cite("s-1", "m-4")),
    }
    moderation.promote_claim(claims["promoted"], by=mod, note="checked it")
    moderation.contest_claim(claims["promoted"], by=mod, note="bo saw otherwise")
    moderation.reject_claim(claims["rejected"], by=mod, reason="no")
    moderation.promote_claim(claims["retracted"], by=mod)
    moderation.retract_claim(claims["retracted"], by=mod, note="3.12 now")
    moderation.promote_claim(claims["old"], by=mod)
    moderation.supersede_claim(claims["old"], by=mod, new=claims["new"], note="v2")
    handoffs.create_handoff(ada, summary="half migrated", next_steps="finish 0042",
                            session=s1)
    picked = handoffs.create_handoff(bo, summary="webhooks", status="blocked")
    handoffs.pick_up_handoff(picked, by=ada, expected_version=picked.version, confirm=True)
    assert Handoff.objects.filter(fleet=fleet, state="picked_up").count() == 1
    return {k: Claim.objects.get(pk=c.pk) for k, c in claims.items()}


def export_to(fleet: str, out: Path, *args: str) -> Path:
    call_command("export_fleet", fleet, "--out", str(out), *args, stdout=io.StringIO(),
                 stderr=io.StringIO())
    return out


def import_(path: Path | str, *args: str) -> str:
    out = io.StringIO()
    call_command("import_fleet", str(path), *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def tamper(export: Path, name: str, edit: Callable[[bytes], bytes], *,
           fix_manifest: bool = True) -> Path:
    """Edit one file of an export in place; by default the manifest is made to agree
    (sha256 and count), so the line-level checks are what must refuse it."""
    path = export / name
    path.write_bytes(edit(path.read_bytes()))
    if fix_manifest:
        manifest_path = export / "manifest.json"
        manifest: dict[str, Any] = json.loads(manifest_path.read_bytes())
        data = path.read_bytes()
        manifest["files"][name]["sha256"] = archive.sha256(data)
        if name.endswith(".jsonl"):
            lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
            manifest["counts"][name.removesuffix(".jsonl")] = lines
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return export


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
