"""Server CPU per REST request: this checkout against another commit, in the same run.

    CTXLAKE_HOME=… .venv/bin/python bench/rest_cpu_ab.py --baseline REF [--rounds 8]
        [--requests 600] [--clients 2]

Starts two production web servers (gunicorn with `gunicorn_conf.py`, one worker each, as
live_server starts them): one serving this checkout, one serving REF from a throwaway git
worktree. Both use the configured database, so REF must have the same migrations (checked
first: with a different schema the two would not be measuring the same thing). After a
VACUUM ANALYZE and a warm-up, each round sends `--requests` requests to each server in
turn (the order alternating round by round), from `--clients` keep-alive clients, a
quarter each of: an agent listing, a lease claim, GET changes naming the files the host
holds (none: the answer inlines the roster, as a long-poll answer does after a render),
and GET cache/roster.json (a ~100 KB roster of 500 agents, rendered anew every
`--render-every` requests, as agent hosts fetch each new render; published by this process
between batches, alike for both).
It reads the CPU each server's process tree used (/proc) and Postgres' (the whole server:
the two never run at once), and prints per round and as medians: gunicorn ms of CPU per
request, Postgres ms per request, wall ms per request, and this checkout's ratio to REF.
The load average is printed beside every round: only figures of the same run compare.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

from args import positive_int  # noqa: E402
from django.utils import timezone  # noqa: E402
from live_server import (  # noqa: E402
    baseline_checkout,
    free_port,
    load,
    postgres_pid,
    start_gunicorn,
    stop,
    tree_cpu,
)

from ctxlake_site import db_health  # noqa: E402
from fleet import artifacts, deletion, tokens  # noqa: E402
from fleet.models import Agent, Fleet  # noqa: E402
from mcp_bridge import contract  # noqa: E402

MIGRATIONS = ("ctxlake_site/migrations", "fleet/migrations", "claims/migrations")


def same_schema(ref: str) -> bool:
    """Whether REF's migrations are this checkout's (committed and uncommitted alike)."""
    diff = subprocess.run(["git", "diff", "--quiet", ref, "--", *MIGRATIONS], cwd=ROOT)
    untracked = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--",
                                *MIGRATIONS], cwd=ROOT, capture_output=True, text=True)
    return diff.returncode == 0 and not untracked.stdout.strip()


def requests_for(slug: str) -> Callable[[int], tuple[str, str, bytes | None]]:
    base = f"/api/v1/fleets/{slug}"

    def nth(i: int) -> tuple[str, str, bytes | None]:
        kind = i % 4
        if kind == 0:
            return "GET", f"{base}/agents?limit=1", None
        if kind == 1:
            body = {"paths": [f"src/p{i % 50}/m.py"], "reason": "bench", "ttl_secs": 600}
            return "POST", f"{base}/leases/claim", json.dumps(body).encode()
        if kind == 2:  # as a host's long-poll asks it: naming what it holds (here nothing)
            return "GET", f"{base}/changes?have=", None
        return "GET", f"{base}/cache/{contract.ROSTER}", None

    return nth


def render_roster(fleet: Fleet, serial: int) -> None:
    """A new roster.json of 500 agents with two leases each (~100 KB), as a render
    publishes it: a new body, so the next fetch of each server reads it."""
    agents = [{"agent_id": f"agent-{a:03d}", "runtime": "claude-code", "host": f"h{a % 50}",
               "leases": [{"path": f"src/{a}/{n}/**", "reason": f"bench {serial}",
                           "expires_at": "2026-12-05T12:00:00Z"} for n in range(2)]}
              for a in range(500)]
    body = json.dumps({"agents": agents, "serial": serial}).encode()
    artifacts.publish(fleet, {contract.ROSTER: body}, at=timezone.now(),
                      keep=[f.name for f in artifacts.listing(fleet) if f.name != contract.ROSTER])


def send(port: int, first: int, count: int, clients: int, secret: str,
         nth: Callable[[int], tuple[str, str, bytes | None]]) -> None:
    """Requests first … first + count - 1 (nth's), from `clients` keep-alive connections."""
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}

    def client(offset: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            for i in range(first + offset, first + count, clients):
                method, path, body = nth(i)
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                if response.status >= 400 and response.status != 304:
                    raise SystemExit(f"{method} {path}: HTTP {response.status}")
        finally:
            conn.close()

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))


def run(port: int, n: int, args: argparse.Namespace, fleet: Fleet, secret: str,
        nth: Callable[[int], tuple[str, str, bytes | None]], serial: list[int]) -> None:
    """`n` requests to one server, with a new roster rendered every args.render_every."""
    for first in range(0, n, args.render_every):
        serial[0] += 1
        render_roster(fleet, serial[0])
        send(port, first, min(args.render_every, n - first), args.clients, secret, nth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, metavar="REF",
                        help="the commit to compare with (same migrations)")
    parser.add_argument("--rounds", type=positive_int, default=8)
    parser.add_argument("--requests", type=positive_int, default=600, help="per server, per round")
    parser.add_argument("--clients", type=positive_int, default=2)
    parser.add_argument("--render-every", type=positive_int, default=100, metavar="N",
                        help="requests between two renders of roster.json (default 100)")
    args = parser.parse_args()
    if not same_schema(args.baseline):
        raise SystemExit(f"{args.baseline} has other migrations than this checkout: "
                         "the two servers cannot share the database")
    pg = postgres_pid()
    if pg is None:
        raise SystemExit("no Postgres process found to measure (is the database local?)")

    slug = f"bench-ab-{uuid.uuid4().hex[:6]}"
    fleet = Fleet.objects.create(slug=slug, name=slug, memory_mode="live")
    agent = Agent.objects.create(fleet=fleet, agent_id="bench")
    secret = tokens.issue_token(fleet, role="agent", name="bench", agent=agent).secret
    nth = requests_for(slug)
    serial = [0]  # renders so far: each roster differs from the one before
    db_health.vacuum()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {load()}; "
          f"baseline {args.baseline}", flush=True)

    with (tempfile.TemporaryDirectory(prefix="rest-ab-") as tmp,
          baseline_checkout(args.baseline, Path(tmp)) as worktree):
        servers: dict[str, tuple[int, subprocess.Popen[bytes]]] = {}
        figures: dict[str, list[tuple[float, float, float]]] = {"baseline": [], "this": []}
        try:
            for name, root in (("baseline", worktree), ("this", ROOT)):
                port = free_port()
                servers[name] = (port, start_gunicorn(port, 1, root=root))
            for port, _ in servers.values():
                run(port, args.requests, args, fleet, secret, nth, serial)  # warm up
            for r in range(args.rounds):
                order = ("baseline", "this") if r % 2 == 0 else ("this", "baseline")
                for name in order:
                    port, proc = servers[name]
                    web0, pg0, t0 = tree_cpu(proc.pid), tree_cpu(pg), time.perf_counter()
                    run(port, args.requests, args, fleet, secret, nth, serial)
                    per = 1000 / args.requests
                    figures[name].append(((tree_cpu(proc.pid) - web0) * per,
                                          (tree_cpu(pg) - pg0) * per,
                                          (time.perf_counter() - t0) * per))
                b, t = figures["baseline"][-1], figures["this"][-1]
                print(f"round {r + 1}/{args.rounds}: gunicorn {b[0]:.2f} → {t[0]:.2f} ms/req, "
                      f"postgres {b[1]:.2f} → {t[1]:.2f}, wall {b[2]:.2f} → {t[2]:.2f}  "
                      f"[{load()}]", flush=True)
        finally:
            for _, proc in servers.values():
                stop(proc)
            deletion.delete_fleet(fleet)

    def median(name: str, i: int) -> float:
        return statistics.median(f[i] for f in figures[name])

    for i, what in enumerate(("gunicorn CPU", "Postgres CPU", "wall")):
        base, this = median("baseline", i), median("this", i)
        wins = sum(t[i] < b[i] for b, t in zip(figures["baseline"], figures["this"], strict=True))
        print(f"{what:13} ms/request, median of {args.rounds}: baseline {base:.3f}, this "
              f"{this:.3f} ({this / base:.2f}×; lower in {wins} of {args.rounds} rounds)")
    print(f"done  [{load()}]")


if __name__ == "__main__":
    main()
