"""REST API bench: claims search at 10k and 100k claims (with vectors), lease claim, and
the roster (status, a page of leases, the roster render) with 10k live leases, over HTTP.

Runs the production server (gunicorn gthread workers, as `./ctxlake up` runs it) on
127.0.0.1 against the configured database, in a throwaway fleet that is deleted at the
end. Claims carry embeddings (seeded random unit vectors under the current model's name:
latency does not depend on what they mean), so every search runs both lists; every
search request is a query not asked before, so the server embeds each one, as it would
for a caller. The database is vacuumed and analyzed (ctxlake_site.db_health) after each
seeding, before measuring. Prints requests/s, p50 and p95 for each scenario and for a
baseline (a trivial authenticated endpoint measured in the same run), the ratios to that
baseline, and the load average beside every figure.

    /work/main/.venv/bin/python bench/api_bench.py [--requests 400] [--workers 2]
        [--more-claims 90000]

Targets (issue 17): claims search p50 <= 15 ms at 10k and <= 30 ms at 100k claims; lease
claim p50 <= 15 ms; status and a page of leases <= 100 ms, and the roster render <= 1 s,
with 10k live leases.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402
from live_server import free_port, load, make_claims, start_gunicorn, stop, vocabulary  # noqa: E402

from ctxlake_site import db_health  # noqa: E402
from fleet import cache_render, tokens  # noqa: E402
from fleet.globs import literal_prefix  # noqa: E402
from fleet.models import Agent, Fleet, Lease  # noqa: E402

TARGETS = {
    "claims search @10k": 15.0,
    "claims search @100k": 30.0,
    "lease claim": 15.0,
    "status @10k leases": 100.0,
    "leases?limit=5 @10k": 100.0,
}
HOARD = 10_000  # live leases of one agent for the roster scenarios
Request = Callable[[int], tuple[str, str, bytes | None]]


def measure(port: int, secret: str, make: Request, total: int, clients: int) -> dict[str, float]:
    """`total` requests from `clients` threads; latency per request, throughput overall."""
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}

    def one(i: int) -> float:
        method, path, body = make(i)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        began = time.perf_counter()
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        took = time.perf_counter() - began
        conn.close()
        if response.status >= 300:
            raise SystemExit(f"{method} {path}: HTTP {response.status}")
        return took * 1000

    for i in range(total, total + min(20, total)):  # warm up workers, connections, model
        one(i)
    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        latencies = sorted(pool.map(one, range(total)))
    elapsed = time.perf_counter() - began
    return {
        "rps": total / elapsed,
        "p50": statistics.median(latencies),
        "p95": latencies[int(len(latencies) * 0.95) - 1],
        "load": load(),  # type: ignore[dict-item]
    }


def report(name: str, figures: dict[str, float], baseline: dict[str, float]) -> str:
    target = TARGETS.get(name)
    verdict = (
        ""
        if target is None
        else (f"  target p50 <= {target:.0f} ms: {'met' if figures['p50'] <= target else 'MISSED'}")
    )
    return (
        f"{name:<22} {figures['rps']:8.1f} req/s  p50 {figures['p50']:6.1f} ms  "
        f"p95 {figures['p95']:6.1f} ms  (p50 x{figures['p50'] / baseline['p50']:.2f} baseline)"
        + verdict
        + f"  [{figures['load']}]"
    )


def vacuumed(what: str) -> None:
    """VACUUM (ANALYZE) ctxlake's tables: every measurement starts from a fresh database."""
    began = time.perf_counter()
    db_health.vacuum()
    print(f"vacuum (analyze) after {what}: {time.perf_counter() - began:.1f}s  [{load()}]")
    for health in db_health.index_report():
        print(f"  {'BLOATED ' if health.bloated else ''}{health.describe()}")


def hoard(fleet: Fleet, agents: list[Agent]) -> Agent:
    """HOARD live leases of one agent (as before the per-agent cap), a few overlapped."""
    hoarder = Agent.objects.create(fleet=fleet, agent_id="hoarder")
    now = timezone.now()
    rows = [(hoarder, f"lib/m{i}/**") for i in range(HOARD)]
    rows += [(agents[1 + i % 9], f"lib/m{i * 997 % HOARD}/x.py") for i in range(20)]
    Lease.objects.bulk_create(
        [
            Lease(fleet=fleet, agent=agent, path=path, prefix=literal_prefix(path),
                  acquired_at=now, expires_at=now + timedelta(hours=1))
            for agent, path in rows
        ],
        batch_size=5000,
    )
    return hoarder


def time_render(fleet: Fleet, rounds: int = 5) -> str:
    """The roster render (roster.json's body) with the hoard; baseline: reading the rows."""
    renders, reads = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        list(Lease.objects.active().filter(fleet=fleet).values_list("path", "expires_at"))
        reads.append(time.perf_counter() - began)
        began = time.perf_counter()
        roster = cache_render.render_roster(fleet, now=timezone.now())
        renders.append(time.perf_counter() - began)
    held = sum(len(a["leases"]) for a in roster["agents"])
    best, median = min(renders) * 1000, statistics.median(renders) * 1000
    return (
        f"roster render @{held // 1000}k leases  median {median:6.0f} ms  best {best:6.0f} ms  "
        f"({len(roster['contention'])} contended pairs; reading the rows "
        f"{statistics.median(reads) * 1000:.0f} ms)  target <= 1000 ms: "
        f"{'met' if median <= 1000 else 'MISSED'}  [{load()}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="per scenario")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--clients", type=int, default=2, help="concurrent client threads")
    parser.add_argument("--more-claims", type=int, default=90_000,
                        help="claims added for the large search (0 skips it)")
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)
    print(f"maintenance before the run (ctxlake_site.db_health)  [{load()}]")
    db_health.maintain(commit=True, say=lambda line: None)
    rng = random.Random(6)
    words = vocabulary()
    slug = f"bench-{uuid.uuid4().hex[:8]}"
    fleet = Fleet.objects.create(slug=slug, name="API bench (throwaway)", memory_mode="live")
    server = None
    try:
        agents = [Agent.objects.create(fleet=fleet, agent_id=f"bot-{i}") for i in range(10)]
        now = timezone.now()
        Lease.objects.bulk_create(
            [
                Lease(
                    fleet=fleet,
                    agent=agents[i % 10],
                    path=f"src/pkg{i}/**",
                    prefix=literal_prefix(f"src/pkg{i}/**"),
                    acquired_at=now,
                    expires_at=now + timedelta(hours=1),
                )
                for i in range(50)
            ]
        )
        reader = tokens.issue_token(fleet, role="integration", name="bench-read").secret
        writer = tokens.issue_token(fleet, role="agent", name="bench-agent", agent=agents[0]).secret
        mid = words[200:2000]
        n, c = args.requests, args.clients
        # a query never asked before on every request (two mid-frequency words, or one
        # common word with a mid one): the server embeds each, as for a real caller
        queries = [f"{rng.choice(mid)} {rng.choice(mid)}" for _ in range(n + 20)]
        queries += [f"{rng.choice(words[50:400])} {rng.choice(mid)}" for _ in range(n + 20)]
        rng.shuffle(queries)
        base = f"/api/v1/fleets/{slug}"
        asked = iter(range(10**9))

        def search(i: int) -> tuple[str, str, bytes | None]:
            q = queries[next(asked) % len(queries)].replace(" ", "+")
            return "GET", f"{base}/claims/search?q={q}&k=10", None

        def trivial(i: int) -> tuple[str, str, bytes | None]:
            return "GET", f"{base}/agents?limit=1", None

        def claim(i: int) -> tuple[str, str, bytes | None]:
            body = {"paths": [f"src/pkg{i % 60}/mod.py"], "reason": "bench", "ttl_secs": 600}
            return "POST", f"{base}/leases/claim", json.dumps(body).encode()

        def status(i: int) -> tuple[str, str, bytes | None]:
            return "GET", f"{base}/status", None

        def lease_page(i: int) -> tuple[str, str, bytes | None]:
            return "GET", f"{base}/leases?limit=5", None

        make_claims(fleet, 0, 10_000, words, rng)
        vacuumed("seeding 10k claims with vectors")
        port = free_port()
        server = start_gunicorn(port, args.workers)
        print(
            f"gunicorn gthread workers: {args.workers}; clients: {c}; requests/scenario: {n}; "
            f"cores: {os.cpu_count()}"
        )
        baseline = measure(port, reader, trivial, n, c)
        lines = [report("baseline (GET agents)", baseline, baseline)]
        lines.append(report("claims search @10k", measure(port, reader, search, n, c), baseline))
        lines.append(report("lease claim", measure(port, writer, claim, n, c), baseline))
        hoard(fleet, agents)
        vacuumed(f"seeding {HOARD:,} live leases of one agent")
        lines.append(report("status @10k leases", measure(port, reader, status, n, c), baseline))
        lines.append(
            report("leases?limit=5 @10k", measure(port, reader, lease_page, n, c), baseline)
        )
        lines.append(time_render(fleet))
        if args.more_claims:
            make_claims(fleet, 10_000, args.more_claims, words, rng)
            vacuumed(f"seeding {args.more_claims:,} more claims with vectors")
            size = (10_000 + args.more_claims) // 1000
            lines.append(
                report(f"claims search @{size}k", measure(port, reader, search, n, c), baseline)
            )
        print("\n".join(lines))
    finally:
        if server is not None:
            stop(server)
        Fleet.objects.filter(pk=fleet.pk).delete()


if __name__ == "__main__":
    main()
