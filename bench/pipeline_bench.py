"""Pipeline benchmark: drain throughput and render time, against the real database.

    .venv/bin/python bench/pipeline_bench.py [--events 10000] [--claims 10000 100000]

Drain: 10k mixed spool events (40% lease.claim, 20% lease.release, 15% handoff.create,
25% claim.proposed) from 8 agents, written by the bridge's own Spool, drained by the
shipped path (commuting runs applied a kind at a time); compared in the same run with the
same events applied one applier call per event, and with a savepoint per event.
Render: a fleet with N promoted claims (random unit vectors stored as pgvector embeddings),
`render_fleet` end to end; the baseline is just reading the same rows out of Postgres.
Everything runs in throwaway fleets that are deleted afterwards; the database is vacuumed
and analyzed (ctxlake_site.db_health) before each measurement, and the load average is
printed beside every figure. Targets (issue 4, 17): drain ≥ 2,000 events/s; render ≤ 3 s
at 10k and ≤ 30 s at 100k claims.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")
TMP = Path(tempfile.mkdtemp(prefix="ctxlake-bench-"))
os.environ["CTXLAKE_SPOOL_DIR"] = str(TMP / "spool")
os.environ["CTXLAKE_CACHE_DIR"] = str(TMP / "cache")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.utils import timezone  # noqa: E402

from claims.models import Claim  # noqa: E402
from ctxlake_site import db_health, drain, workers  # noqa: E402
from fleet.models import Fleet  # noqa: E402
from mcp_bridge.contract import embed  # noqa: E402
from mcp_bridge.contract.spool import Spool  # noqa: E402


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def vacuumed() -> None:
    """Measure from a freshly vacuumed, analyzed database (dead rows of earlier runs gone)."""
    db_health.vacuum()


def write_events(slug: str, n: int) -> None:
    spools = [Spool(TMP / "spool", fleet=slug, agent=f"agent-{a}", session=f"s-{a}",
                    max_bytes=1 << 30, file_max_bytes=8 << 20) for a in range(8)]
    for i in range(n):
        spool, k = spools[i % 8], i % 20
        if k < 8:
            spool.append("lease.claim", {"paths": [f"src/m{i}/**"], "reason": "work",
                                         "ttl_secs": 1800})
        elif k < 12:
            spool.append("lease.release", {"paths": [f"src/m{i - 8}/**"], "all": False})
        elif k < 15:
            spool.append("handoff.create", {"summary": f"handoff {i}", "status": "in_progress",
                                            "next": "carry on"})
        else:
            spool.append("claim.proposed", {
                "claim": f"observation {i}: the build needs step {i % 97}", "type": "fact",
                "subject": f"build-{i % 13}", "scope": "agent",
                "evidence": [{"session_id": f"s-{i % 8}", "message_id": f"m-{i}"}]})


DRAIN_MODES = {
    "batched": "shipped: commuting runs applied a kind at a time",
    "per-event": "the same transaction, one applier call per event",
    "savepoint": "baseline: a savepoint per event",
}


def bench_drain(n: int) -> dict[str, float]:
    rates = {}
    for mode in DRAIN_MODES:
        slug = f"bench-drain-{mode}-{os.getpid()}"
        Fleet.objects.filter(slug=slug).delete()
        fleet = Fleet.objects.create(slug=slug, name=slug)
        write_events(slug, n)
        batch = workers.BATCH_APPLIERS if mode == "batched" else None
        drainer = drain.Drainer(TMP / "spool", workers.APPLIERS, batch_appliers=batch)
        vacuumed()
        if mode == "savepoint":
            drainer._apply_fast = drainer._apply_slow  # type: ignore[method-assign]
        started = time.perf_counter()
        report = drainer.run(only_fleet=slug)
        elapsed = time.perf_counter() - started
        assert report.applied == n and report.dead == 0, report.as_dict()
        rates[mode] = n / elapsed
        print(f"  drain ({mode:9}): {n} events in {elapsed:.2f}s = {n / elapsed:,.0f} events/s"
              f"  ({DRAIN_MODES[mode]})  [{load()}]")
        fleet.delete()
    return rates


def bench_render(n: int) -> tuple[float, float]:
    slug = f"bench-render-{n}-{os.getpid()}"
    Fleet.objects.filter(slug=slug).delete()
    fleet = Fleet.objects.create(slug=slug, name=slug, memory_mode="live")
    rng = np.random.default_rng(7)
    now = timezone.now()
    for start in range(0, n, 5000):
        vectors = rng.standard_normal((min(5000, n - start), embed.DIMS)).astype("float32")
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        Claim.objects.bulk_create([
            Claim(fleet=fleet, number=start + i + 1, text=f"claim {start + i} on subject",
                  type="fact", subject=f"s{(start + i) % 50}", scope="fleet", status="promoted",
                  promoted_at=now, independent_sessions=1, confidence=0.7, text_hash="0" * 64,
                  embedding=vectors[i], embedding_model=embed.NAME)
            for i in range(len(vectors))
        ])
    vacuumed()
    started = time.perf_counter()
    rows = list(Claim.objects.filter(fleet=fleet).values_list("text", "embedding"))
    floor = time.perf_counter() - started
    started = time.perf_counter()
    report = workers.render_fleet(fleet)
    elapsed = time.perf_counter() - started
    assert report.claims == n == len(rows)
    print(f"  render {n:>7,} claims: {elapsed:.2f}s  (baseline: reading the rows {floor:.2f}s, "
          f"render/baseline {elapsed / floor:.1f}x)  [{load()}]")
    fleet.delete()
    return elapsed, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--claims", type=int, nargs="*", default=[10_000, 100_000])
    args = parser.parse_args()
    print(f"pipeline bench on {os.cpu_count()} cores, spool/cache in {TMP}  [{load()}]")
    db_health.maintain(commit=True)  # vacuum, and rebuild indexes earlier runs bloated
    rates = bench_drain(args.events)
    fast = rates["batched"]
    print(f"  drain batched vs per-event {fast / rates['per-event']:.2f}x, vs savepoint "
          f"baseline {fast / rates['savepoint']:.2f}x "
          f"(target >= 2,000 events/s: {'met' if fast >= 2000 else 'MISSED'})")
    for n in args.claims:
        elapsed, _ = bench_render(n)
        target = 3.0 if n <= 10_000 else 30.0
        print(f"    target <= {target:.0f}s: {'met' if elapsed <= target else 'MISSED'}")


if __name__ == "__main__":
    main()
