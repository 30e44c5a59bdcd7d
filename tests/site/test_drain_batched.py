"""The batched drain must leave exactly what applying the events one by one leaves.

A seeded stream of mixed, overlapping and partly invalid events (claims and releases of
overlapping globs by four agents, lease offers with handoffs, session ends, duplicate and
near-identical proposals, expiring leases, a versioned citation to mark stale) is written
to two fleets' spools. One fleet is drained by the shipped path (drain_plan segments, a
batch applier per kind), the other with one applier call per event. Everything an agent
or a moderator can see must come out the same: every event's recorded result, leases,
handoffs, sessions, claims with their evidence and events, the activity log (as a
multiset: inside one batch, rows are written kind by kind), and the dead letters.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from claims import moderation
from claims.models import Claim
from ctxlake_site import drain, drain_plan, workers
from fleet.models import Activity, AppliedEvent, Fleet, Handoff, Lease, Session

AGENTS = ("ada", "bo", "cy", "dee")
PATHS = (
    "src/**", "src/a.py", "src/b/**", "src/b/c.py", "docs", "docs/x.md", "lib/*.py",
    "lib/util.py", "tests/**", "src/a_b.py",
)
TEXTS = (
    "make test needs the fixtures volume", "the staging deploy needs a manual approval",
    "ruff runs before mypy in CI", "the payments API retries twice",
)


def _stream(seed: int, n: int) -> list[dict[str, Any]]:
    """Events without fleet or id: kind, agent, session, at, payload."""
    rng = random.Random(seed)
    start = timezone.now() - timedelta(seconds=n + 60)
    events = []
    for i in range(n):
        agent = rng.choice(AGENTS)
        session = f"{agent}-s{rng.randrange(2)}"
        roll = rng.random()
        if roll < 0.35:
            kind, payload = "lease.claim", {
                "paths": rng.sample(PATHS, rng.randint(1, 3)), "reason": f"r{i}",
                "ttl_secs": rng.choice([30, 600, 3600]),
            }
        elif roll < 0.55:
            every = rng.random() < 0.2
            kind, payload = "lease.release", {
                "paths": [] if every else rng.sample(PATHS, rng.randint(1, 2)), "all": every,
            }
        elif roll < 0.65:
            kind, payload = "handoff.create", {
                "summary": f"handoff {i}", "status": "in_progress", "next": "go on",
                "transfer_leases": rng.random() < 0.3,
            }
        elif roll < 0.70:
            kind, payload = "session.end", {
                "outcome": rng.choice(["success", "partial"]), "summary": f"end {i}",
                "changed_paths": rng.sample(["src/a.py", "docs/x.md"], rng.randint(0, 1)),
            }
        elif roll < 0.90:
            cite = {"session_id": session, "message_id": f"m{i}"}
            if rng.random() < 0.3:
                cite |= {"path": "src/b/c.py", "commit": "abc123"}
            kind, payload = "claim.proposed", {
                "claim": rng.choice(TEXTS), "type": "fact", "subject": "build", "scope": "agent",
                "evidence": [cite],
            }
        else:
            kind, payload = rng.choice([
                ("lease.claim", {"paths": ["/etc/passwd"], "ttl_secs": 60}),
                ("lease.claim", {"paths": "src", "ttl_secs": 60}),
                ("lease.claim", {"paths": ["a"], "ttl_secs": -1}),
                ("lease.release", {"paths": ["../up"]}),
                ("handoff.create", {"summary": "", "status": "in_progress"}),
                ("claim.proposed", {"claim": "c", "type": "fact", "subject": "s",
                                    "evidence": []}),
            ])
        at = start + timedelta(seconds=i)
        events.append({"kind": kind, "agent": agent, "session": session,
                       "at": at.isoformat().replace("+00:00", "Z"), "payload": payload})
    return events


def _write(spool_dir: Path, fleet: Fleet, events: list[dict[str, Any]]) -> list[str]:
    ids, lines = [], []
    for event in events:
        ids.append(str(uuid.uuid4()))
        lines.append(json.dumps({"v": 1, "id": ids[-1], "fleet": fleet.slug, **event}))
    path = spool_dir / "mcp" / f"{fleet.slug}.ndjson"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return ids


def _stale_citation(fleet: Fleet, at: datetime) -> None:
    """A promoted claim citing src/a.py at a commit, cited before every event."""
    proposal = moderation.propose_claim(
        fleet, text="src/a.py parses the config", type="fact", subject="config",
        evidence=[{"session_id": "old", "message_id": "m0", "path": "src/a.py",
                   "commit": "abc"}],
    )
    Claim.objects.filter(pk=proposal.claim.pk).update(
        status="promoted", scope="fleet", promoted_at=at
    )
    proposal.claim.evidence.update(created_at=at)


def _seen(fleet: Fleet, ids: list[str]) -> dict[str, Any]:
    """Everything the two drains must agree on, with row ids mapped to stable names."""
    handoff_name = {h.pk: h.summary for h in Handoff.objects.filter(fleet=fleet)}

    def result(event_id: str) -> Any:
        row = AppliedEvent.objects.filter(event_id=event_id).first()
        if row is None:
            return None
        value = dict(row.result)
        if "handoff" in value:
            value["handoff"] = handoff_name[value["handoff"]]
        if "contention" in value:
            value["contention"] = sorted(value["contention"], key=json.dumps)
        return value

    def activity_key(a: Activity) -> str:
        data = dict(a.data)
        target = a.target_type
        if target == "fleet.handoff":
            target += ":" + handoff_name[int(a.target_id)]
        return json.dumps([a.verb, a.agent.agent_id if a.agent else None, target, data],
                          sort_keys=True)

    return {
        "results": [result(i) for i in ids],
        "leases": sorted(
            (lease.agent.agent_id, lease.path, lease.reason, lease.acquired_at.isoformat(),
             lease.expires_at.isoformat(), lease.released_at is None,
             lease.session.session_id if lease.session else None,
             handoff_name.get(lease.offered_with_id))
            for lease in Lease.objects.filter(fleet=fleet).select_related("agent", "session")
        ),
        "handoffs": sorted(
            (h.summary, h.status, h.next_steps, h.from_agent.agent_id,
             h.from_session.session_id if h.from_session else None, h.source_trust)
            for h in Handoff.objects.filter(fleet=fleet).select_related(
                "from_agent", "from_session")
        ),
        "sessions": sorted(
            (s.session_id, s.agent.agent_id, s.ended_at is not None, s.outcome, s.summary)
            for s in Session.objects.filter(fleet=fleet).select_related("agent")
        ),
        "claims": [
            (c.public_id, c.text, c.status, c.staleness, c.independent_sessions,
             sorted((e.session_id, e.message_id, e.path) for e in c.evidence.all()),
             sorted(Counter(ev.kind for ev in c.events.all()).items()))
            for c in Claim.objects.filter(fleet=fleet).order_by("number")
        ],
        "activity": Counter(
            activity_key(a) for a in Activity.objects.filter(fleet=fleet).select_related("agent")
        ),
    }


def _dead_reasons(spool_dir: Path, fleet: Fleet) -> list[str]:
    path = spool_dir / "dead" / f"{fleet.slug}.ndjson"
    return [json.loads(line)["reason"] for line in path.read_text().splitlines()]


# DRAIN_SEEDS=5,6,…,40 runs more streams (36 more passed when this was written).
SEEDS = [int(seed) for seed in os.environ.get("DRAIN_SEEDS", "1,2,3,4").split(",")]


@pytest.mark.parametrize("seed", SEEDS)
def test_batched_drain_leaves_what_one_by_one_leaves(
    seed: int, db: None, spool_dir: Path
) -> None:
    events = _stream(seed, 400)
    fleets = {
        mode: Fleet.objects.create(slug=f"{mode}-{seed}", name=mode, memory_mode="live")
        for mode in ("batched", "single")
    }
    before = timezone.now() - timedelta(days=1)
    ids = {}
    for mode, fleet in fleets.items():
        _stale_citation(fleet, before)
        ids[mode] = _write(spool_dir, fleet, events)
    resolver = drain._Resolver(fleets["batched"])
    planned = drain_plan.segments(
        [resolver.envelope({"id": str(uuid.uuid4()), **e}) for e in events]
    )
    assert len(planned) < len(events) / 3  # runs of several events really are batched
    batched = drain.Drainer(spool_dir, workers.APPLIERS, batch_appliers=workers.BATCH_APPLIERS)
    single = drain.Drainer(spool_dir, workers.APPLIERS)
    reports = {
        "batched": batched.run(only_fleet=fleets["batched"].slug),
        "single": single.run(only_fleet=fleets["single"].slug),
    }
    assert reports["batched"].applied == reports["single"].applied > 300
    assert reports["batched"].dead == reports["single"].dead > 10
    seen = {mode: _seen(fleet, ids[mode]) for mode, fleet in fleets.items()}
    for key in seen["single"]:
        assert seen["batched"][key] == seen["single"][key], key
    assert _dead_reasons(spool_dir, fleets["batched"]) == _dead_reasons(
        spool_dir, fleets["single"]
    )
    # the stream exercises what the planner must get right
    results = seen["single"]["results"]
    assert any(r and r.get("contention") for r in results)
    assert any(r and r.get("possibly_stale") for r in results)
    assert any(r and r.get("offered") for r in results)
    assert any(r and r.get("created") is False for r in results)
    assert any(r and r.get("not_held") for r in results)


def test_the_planner_batches_a_backlog_into_few_segments(db: None, spool_dir: Path) -> None:
    """Claims, releases of what was claimed, handoffs and proposals by eight agents, in the
    shape of a backlog: one segment, so each kind costs a statement or two per batch."""
    fleet = Fleet.objects.create(slug="plan", name="plan")
    lines = []
    for i in range(200):
        k, agent = i % 20, f"a{i % 8}"
        if k < 8:
            kind, payload = "lease.claim", {"paths": [f"src/m{i}/**"], "ttl_secs": 600}
        elif k < 12:
            kind, payload = "lease.release", {"paths": [f"src/m{i - 8}/**"]}
        elif k < 15:
            kind, payload = "handoff.create", {"summary": f"h{i}"}
        else:
            kind, payload = "claim.proposed", {
                "claim": f"c{i}", "type": "fact", "subject": "s",
                "evidence": [{"session_id": "s", "message_id": f"m{i}"}]}
        lines.append({"id": str(uuid.uuid4()), "kind": kind, "agent": agent, "session": None,
                      "at": "2026-01-01T00:00:00Z", "payload": payload})
    resolver = drain._Resolver(fleet)
    envelopes = [resolver.envelope(e) for e in lines]
    assert len(drain_plan.segments(envelopes)) == 1


def _envelopes(fleet: Fleet, *events: tuple[str, str, dict[str, Any]]) -> list[Any]:
    resolver = drain._Resolver(fleet)
    return [
        resolver.envelope({"id": str(uuid.uuid4()), "kind": kind, "agent": agent,
                           "session": f"{agent}-s", "at": "2026-01-01T00:00:00Z",
                           "payload": payload})
        for kind, agent, payload in events
    ]


@pytest.mark.parametrize(
    ("first", "then", "cut"),
    [
        # the same agent
        (("lease.claim", "ada", {"paths": ["a"]}), ("lease.release", "ada", {"paths": ["a"]}),
         False),
        (("lease.release", "ada", {"paths": ["a"]}), ("lease.claim", "ada", {"paths": ["a"]}),
         True),
        (("lease.release", "ada", {"paths": ["a"]}), ("lease.claim", "ada", {"paths": ["b"]}),
         False),
        (("lease.release", "ada", {"all": True}), ("lease.claim", "ada", {"paths": ["b"]}),
         True),
        (("lease.claim", "ada", {"paths": ["a"]}), ("lease.claim", "ada", {"paths": ["a"]}),
         True),
        (("lease.release", "ada", {"paths": ["a"]}), ("lease.release", "ada", {"paths": ["b"]}),
         False),
        (("lease.release", "ada", {"paths": ["a"]}), ("lease.release", "ada", {"paths": ["a"]}),
         True),
        (("lease.release", "ada", {"paths": ["a"]}), ("lease.release", "ada", {"all": True}),
         True),
        (("lease.release", "ada", {"all": True}), ("lease.release", "ada", {"paths": ["a"]}),
         True),
        (("handoff.create", "ada", {"summary": "s", "transfer_leases": True}),
         ("lease.claim", "ada", {"paths": ["a"]}), True),
        (("handoff.create", "ada", {"summary": "s"}), ("lease.claim", "ada", {"paths": ["a"]}),
         False),
        (("lease.claim", "ada", {"paths": ["a"]}),
         ("handoff.create", "ada", {"summary": "s", "transfer_leases": True}), False),
        # two agents
        (("lease.release", "bo", {"paths": ["src/**"]}),
         ("lease.claim", "ada", {"paths": ["src/a.py"]}), True),
        (("lease.release", "bo", {"paths": ["docs/**"]}),
         ("lease.claim", "ada", {"paths": ["src/a.py"]}), False),
        (("lease.release", "bo", {"all": True}), ("lease.claim", "ada", {"paths": ["x"]}),
         True),
        (("lease.claim", "bo", {"paths": ["src/**"]}),
         ("lease.release", "ada", {"paths": ["src/a.py"]}), False),
        (("lease.claim", "bo", {"paths": ["src/**"]}),
         ("lease.claim", "ada", {"paths": ["src/**"]}), False),
        # unreadable footprints stand alone
        (("lease.claim", "ada", {"paths": "src"}), ("claim.proposed", "bo", {}), True),
        (("claim.proposed", "bo", {}), ("lease.release", "ada", {"paths": ["/abs"]}), True),
    ],
)
def test_the_planner_cuts_exactly_where_reordering_would_change_something(
    db: None, first: tuple[str, str, dict[str, Any]], then: tuple[str, str, dict[str, Any]],
    cut: bool,
) -> None:
    fleet = Fleet.objects.create(slug="cuts", name="cuts")
    assert len(drain_plan.segments(_envelopes(fleet, first, then))) == (2 if cut else 1)


def test_the_same_session_ended_twice_is_cut(db: None) -> None:
    fleet = Fleet.objects.create(slug="ends", name="ends")
    end = ("session.end", "ada", {"outcome": "success"})
    assert len(drain_plan.segments(_envelopes(fleet, end, end))) == 2
