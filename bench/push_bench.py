"""Push bench: REST latency under gunicorn's sync worker and under gthread (as `./ctxlake up`
runs it now), with long-polls parked; and how soon parked long-polls wake after a render.

Same run, same database, same throwaway fleet (deleted at the end), 2 workers each:
1. sync workers: GET agents and POST leases/claim, p50/p95 (the baseline), then the same
   GET while two long-polls (wait=5) hold both workers: why sync cannot serve push;
2. gthread (ctxlake_site/gunicorn_conf.py): the same REST figures, then again with
   `--waiters` long-polls parked on GET changes, then a render and each waiter's wake time
   (render committed → answer received).
The load average is printed beside every figure.

    CTXLAKE_HOME=… .venv/bin/python bench/push_bench.py [--requests 300] [--waiters 8]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from live_server import free_port, load, start_gunicorn, stop  # noqa: E402

from ctxlake_site import workers  # noqa: E402
from fleet import change_feed, tokens  # noqa: E402
from fleet.models import Agent, CacheHead, Fleet  # noqa: E402

Call = Callable[[int], tuple[str, str, bytes | None]]


def request(port: int, secret: str, method: str, path: str, body: bytes | None = None,
            timeout: float = 60) -> tuple[int, bytes, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    started = time.monotonic()
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data, time.monotonic() - started


def measure(port: int, secret: str, make: Call, total: int) -> str:
    """`total` requests from 2 client threads: p50 and p95 in ms."""
    def one(i: int) -> float:
        status, data, seconds = request(port, secret, *make(i))
        assert status < 300, (status, data[:200])
        return seconds * 1000

    with ThreadPoolExecutor(2) as pool:
        ms = sorted(pool.map(one, range(total)))
    return f"p50 {statistics.median(ms):7.1f} ms  p95 {ms[int(len(ms) * 0.95)]:7.1f} ms"


def park(pool: ThreadPoolExecutor, port: int, secrets: list[str], base: str, after: str,
         wait: int) -> list[Future[tuple[int, bytes, float]]]:
    path = f"{base}/changes?after={after}&wait={wait}"
    return [pool.submit(request, port, s, "GET", path) for s in secrets]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300, help="per REST figure")
    parser.add_argument("--waiters", type=int, default=8, help="long-polls parked (gthread)")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)
    slug = f"bench-{uuid.uuid4().hex[:8]}"
    fleet = Fleet.objects.create(slug=slug, name="push bench (throwaway)")
    base, n = f"/api/v1/fleets/{slug}", args.requests
    print(f"push_bench {datetime.now(UTC):%Y-%m-%d %H:%M}Z, cores {os.cpu_count()}, "
          f"{n} requests per figure, 2 clients, 2 gunicorn workers")
    try:
        agent = Agent.objects.create(fleet=fleet, agent_id="bot-0")
        reader = tokens.issue_token(fleet, role="integration", name="read").secret
        writer = tokens.issue_token(fleet, role="agent", name="w", agent=agent).secret
        hosts = [tokens.issue_token(fleet, role="integration", name=f"host-{i}").secret
                 for i in range(args.waiters)]
        workers.render_fleet(fleet)
        version = change_feed.current_version(slug)

        def agents(i: int) -> tuple[str, str, bytes | None]:
            return "GET", f"{base}/agents?limit=1", None

        def claim(i: int) -> tuple[str, str, bytes | None]:
            body = {"paths": [f"src/pkg{i % 60}/mod.py"], "reason": "bench", "ttl_secs": 600}
            return "POST", f"{base}/leases/claim", json.dumps(body).encode()

        for worker_class in ("sync", "gthread"):
            port = free_port()
            server = start_gunicorn(port, 2, worker_class=worker_class)
            try:
                measure(port, reader, agents, 20)  # warm both workers
                print(f"{worker_class:8} GET agents           {measure(port, reader, agents, n)}"
                      f"  [{load()}]")
                print(f"{worker_class:8} POST leases/claim    {measure(port, writer, claim, n)}"
                      f"  [{load()}]")
                with ThreadPoolExecutor(args.waiters + 2) as pool:
                    if worker_class == "sync":
                        held = park(pool, port, hosts[:2], base, version, 5)
                        time.sleep(1)  # bench only: let both reach a worker
                        _, _, seconds = request(port, reader, *agents(0))
                        print(f"sync     GET agents, 2 long-polls parked: {seconds * 1000:.0f} ms"
                              f" (waited for a worker)  [{load()}]")
                        [f.result() for f in held]
                        continue
                    held = park(pool, port, hosts, base, version, 30)
                    time.sleep(1)  # bench only: let them park before measuring beside them
                    print(f"gthread  GET agents, {args.waiters} parked "
                          f"{measure(port, reader, agents, n)}  [{load()}]")
                    workers.render_fleet(fleet)
                    rendered = time.monotonic()
                    woke = sorted(
                        (time.monotonic() - rendered) * 1000
                        for f in held if f.result()[0] == 200)
                    version = change_feed.current_version(slug)
                    print(f"gthread  {len(woke)}/{args.waiters} woken by a render: p50 "
                          f"{statistics.median(woke):.0f} ms, last {woke[-1]:.0f} ms after "
                          f"COMMIT (upper bound: results collected in order)  [{load()}]")
            finally:
                stop(server)
    finally:
        # heads first: CacheHead → CacheArtifact is PROTECT, and a fleet's delete
        # collects both (a ProtectedError on main as of 2026-12-04)
        CacheHead.objects.filter(fleet=fleet).delete()
        fleet.delete()


if __name__ == "__main__":
    main()
