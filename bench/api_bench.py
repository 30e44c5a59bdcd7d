"""REST API bench: claims search at 10k and 100k claims, and lease claim, over real HTTP.

Runs the production server (gunicorn sync workers, as `./ctxlake up` runs it) on
127.0.0.1 against the configured database, in a throwaway fleet that is deleted at the
end. Prints requests/s, p50 and p95 for each scenario and for a baseline (a trivial
authenticated endpoint measured in the same run), and the ratios to that baseline.

    /work/main/.venv/bin/python bench/api_bench.py [--requests 400] [--workers 2]

Targets (issue 6): claims search p50 <= 30 ms at 100k claims; lease claim p50 <= 15 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
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
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from claims.models import Claim, text_hash  # noqa: E402
from fleet import tokens  # noqa: E402
from fleet.models import Agent, Fleet, Lease  # noqa: E402

TARGETS = {"claims search @100k": 30.0, "lease claim": 15.0}
Request = Callable[[int], tuple[str, str, bytes | None]]


def vocabulary() -> list[str]:
    words = (ROOT / "mcp_bridge" / "contract" / "data" / "vocab.txt").read_text().split()
    return [w for w in words if w.isalpha() and w.isascii() and 4 <= len(w) <= 10][:8000]


def make_claims(fleet: Fleet, start: int, count: int, words: list[str], rng: random.Random) -> None:
    """Bulk-insert promoted claims with Zipf-ish word use (numbers and hashes set by hand)."""
    weights = [1 / (rank + 10) for rank in range(len(words))]
    now = timezone.now()
    types = Claim.Type.values
    for batch in range(start, start + count, 5000):
        rows = []
        for n in range(batch, min(batch + 5000, start + count)):
            text = " ".join(rng.choices(words, weights, k=12)) + f" (#{n})"
            rows.append(
                Claim(
                    fleet=fleet,
                    number=n + 1,
                    text=text,
                    text_hash=text_hash(text),
                    type=types[n % len(types)],
                    subject=f"subject-{n % 200}",
                    scope=Claim.Scope.FLEET,
                    status=Claim.Status.PROMOTED,
                    promoted_at=now,
                    independent_sessions=1 + n % 3,
                )
            )
        Claim.objects.bulk_create(rows)
    Fleet.objects.filter(pk=fleet.pk).update(claim_seq=start + count)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, workers: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CTXLAKE_API_RATE_PER_MINUTE": "100000000"}
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "ctxlake_site.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("gunicorn did not start")


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

    for i in range(min(20, total)):  # warm up workers, connections and caches
        one(i)
    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        latencies = sorted(pool.map(one, range(total)))
    elapsed = time.perf_counter() - began
    return {
        "rps": total / elapsed,
        "p50": statistics.median(latencies),
        "p95": latencies[int(len(latencies) * 0.95) - 1],
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
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="per scenario")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--clients", type=int, default=2, help="concurrent client threads")
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)
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
                    acquired_at=now,
                    expires_at=now + timedelta(hours=1),
                )
                for i in range(50)
            ]
        )
        reader = tokens.issue_token(fleet, role="integration", name="bench-read").secret
        writer = tokens.issue_token(fleet, role="agent", name="bench-agent", agent=agents[0]).secret
        mid = words[200:2000]
        queries = [f"{rng.choice(mid)} {rng.choice(mid)}" for _ in range(50)]
        queries += [rng.choice(words[50:400]) for _ in range(50)]  # one common word: many hits
        base = f"/api/v1/fleets/{slug}"

        def search(i: int) -> tuple[str, str, bytes | None]:
            q = queries[i % len(queries)].replace(" ", "+")
            return "GET", f"{base}/claims/search?q={q}&k=10", None

        def trivial(i: int) -> tuple[str, str, bytes | None]:
            return "GET", f"{base}/agents?limit=1", None

        def claim(i: int) -> tuple[str, str, bytes | None]:
            body = {"paths": [f"src/pkg{i % 60}/mod.py"], "reason": "bench", "ttl_secs": 600}
            return "POST", f"{base}/leases/claim", json.dumps(body).encode()

        make_claims(fleet, 0, 10_000, words, rng)
        port = free_port()
        server = start_server(port, args.workers)
        n, c = args.requests, args.clients
        print(
            f"gunicorn sync workers: {args.workers}; clients: {c}; requests/scenario: {n}; "
            f"cores: {os.cpu_count()}"
        )
        baseline = measure(port, reader, trivial, n, c)
        lines = [report("baseline (GET agents)", baseline, baseline)]
        lines.append(report("claims search @10k", measure(port, reader, search, n, c), baseline))
        lines.append(report("lease claim", measure(port, writer, claim, n, c), baseline))
        make_claims(fleet, 10_000, 90_000, words, rng)
        with connection.cursor() as cursor:  # fresh statistics, as autovacuum would
            cursor.execute("ANALYZE claims_claim")
        lines.append(report("claims search @100k", measure(port, reader, search, n, c), baseline))
        print("\n".join(lines))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        Fleet.objects.filter(pk=fleet.pk).delete()


if __name__ == "__main__":
    main()
