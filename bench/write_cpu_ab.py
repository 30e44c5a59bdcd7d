"""Server CPU per agent write: this checkout against any other commit, in the same run.

    CTXLAKE_HOME=… .venv/bin/python bench/write_cpu_ab.py --baseline REF [--agents 200]
        [--write-every 5] [--seconds 60] [--rounds 2] [--claims 1000] [--json]

Issue 25's measure: the whole server's CPU (web, workers and Postgres) for each agent write,
under the same load generator for both sides. Unlike rest_cpu_ab.py, REF may have other
migrations: each side gets a database of its own on the same Postgres server, migrated and
seeded by its own code (bench/ab_seed.py: the fleet, `--agents` agents with a token each,
`--claims` promoted claims, then VACUUM ANALYZE), and its own spool and cache directories.

Each round runs the two sides in turn (the order alternating round by round); a side's turn
starts its server the way its own `./ctxlake up` does (gunicorn with
`ctxlake_site/gunicorn_conf.py` where the checkout has one, gunicorn's sync workers where it
has not; no access log on either side; `manage.py qcluster`), waits until the workers are
idle, then sends fleet_scale.py's write mix (lease claim, claim proposal, lease release,
handoff created or cleared) from `--agents` agents, one write each every `--write-every`
seconds for `--seconds`, and waits again until the workers and Postgres are idle (the
renders and embeddings the writes caused count; at most `--settle` seconds). The CPU of the
side's gunicorn and qcluster process trees and of the Postgres server (only one side runs at
a time) over that span, divided by the writes served, is the figure; the window alone is
printed beside it. Then the side's server stops. The load average is printed on every line:
only figures of the same run compare.
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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402
import psycopg  # noqa: E402

django.setup()

from args import positive_int  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from fleet_scale import AgentState, Credentials, Writer, drive, pct, spread  # noqa: E402
from live_server import (  # noqa: E402
    UNLIMITED_RATE,
    baseline_checkout,
    free_port,
    load,
    postgres_pid,
    start_gunicorn,
    start_qcluster,
    stop,
    tree_cpu,
)

SLUG = "bench-write-ab"
SETTLE_SLICE = 2.0  # seconds per idleness reading
IDLE_CORES = 0.05  # a side is idle once its workers and Postgres use less than this
WARM_UP_REQUESTS = 20


@dataclass
class Side:
    name: str
    root: Path
    db: str  # its own database on the server
    env: dict[str, str]
    agents: list[AgentState] = field(default_factory=list)
    creds: Credentials | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def worker_class(self) -> str:
        """As the side's own `./ctxlake up` serves: its gunicorn config, or (older
        checkouts, which had none) gunicorn's sync workers."""
        return "gthread" if (self.root / "ctxlake_site" / "gunicorn_conf.py").exists() else "sync"


def side_env(db_name: str, tmp: Path, name: str) -> dict[str, str]:
    """The side's database (another name on the same server) and its own local dirs."""
    env = {"CTXLAKE_API_RATE_PER_MINUTE": UNLIMITED_RATE,
           "CTXLAKE_SPOOL_DIR": str(tmp / name / "spool"),
           "CTXLAKE_CACHE_DIR": str(tmp / name / "cache")}
    url = os.environ.get("DATABASE_URL")
    if url:
        head, _, tail = url.partition("?")
        env["DATABASE_URL"] = head.rsplit("/", 1)[0] + f"/{db_name}" + (f"?{tail}" if tail else "")
    else:
        env["CTXLAKE_DB_NAME"] = db_name
    return env


def create_database(name: str) -> None:
    with connection.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(name)} WITH (FORCE)")
        cur.execute(f"CREATE DATABASE {connection.ops.quote_name(name)}")


def drop_database(name: str) -> None:
    with connection.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(name)} WITH (FORCE)")


def seed(side: Side, agents: int, claims: int, out: TextIO) -> None:
    began = time.perf_counter()
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "ab_seed.py"), SLUG,
                           str(agents), str(claims)], cwd=side.root,
                          env={**os.environ, **side.env}, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"seeding the {side.name} side failed:\n{done.stderr[-3000:]}")
    secrets = json.loads(done.stdout.strip().splitlines()[-1])
    side.creds = Credentials(secrets, {})
    side.agents = [AgentState(agent, host) for host, ids in spread(agents, 1).items()
                   for agent in ids]
    print(f"{side.name}: database {side.db} migrated "
          f"and seeded by {side.root.name}'s code ({agents} agents, {claims} claims) in "
          f"{time.perf_counter() - began:.0f}s  [{load()}]", file=out, flush=True)


def settle(pids: dict[str, int], limit: float) -> float:
    """Wait until the workers and Postgres together use < IDLE_CORES; the seconds it took."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        before = tree_cpu(pids["qcluster"]) + tree_cpu(pids["postgres"])
        time.sleep(SETTLE_SLICE)
        if tree_cpu(pids["qcluster"]) + tree_cpu(pids["postgres"]) - before \
                < IDLE_CORES * SETTLE_SLICE:
            break
    return time.monotonic() - began


def warm_up(port: int, secret: str) -> None:
    """A few requests before the window, so each web worker's lazy imports (the URL conf,
    the views) are behind it, on both sides alike."""
    headers = {"Authorization": f"Bearer {secret}"}
    for _ in range(WARM_UP_REQUESTS):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", f"/api/v1/fleets/{SLUG}/agents?limit=1", headers=headers)
            response = conn.getresponse()
            response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise SystemExit(f"warm-up request: HTTP {response.status}")


def worker_tasks(db: str, since: datetime) -> dict[str, int]:
    """django-q tasks the side's workers ran since `since`, by function: how many renders
    and embedding passes the writes cost (read from the side's own database)."""
    params = {**connection.get_connection_params(), "dbname": db, "autocommit": True}
    with psycopg.connect(**params) as conn:
        rows = conn.execute("SELECT func, count(*) FROM django_q_task WHERE started >= %s "
                            "GROUP BY func", [since]).fetchall()
    return {func.rsplit(".", 1)[-1]: int(n) for func, n in rows}


def turn(side: Side, args: argparse.Namespace, pg: int) -> dict[str, Any]:
    """One side's server up, idle, the write window, idle again, down: its figures."""
    port = free_port()
    web = start_gunicorn(port, args.web_workers, worker_class=side.worker_class,
                         env=side.env, root=side.root)
    cluster = start_qcluster(args.q_workers, env=side.env, root=side.root)
    pids = {"gunicorn": web.pid, "qcluster": cluster.pid, "postgres": pg}
    assert side.creds is not None
    try:
        warm_up(port, next(iter(side.creds.agent_secret.values())))
        settle(pids, args.settle)  # start-up work (imports, schedules) is not a write's
        cpu0 = {k: tree_cpu(p) for k, p in pids.items()}
        since = datetime.now(UTC)
        t0 = time.monotonic()
        writes, unsent = drive(Writer(port, SLUG, side.creds), side.agents, args.write_every,
                               args.seconds, lambda finished, sent: None)
        window = time.monotonic() - t0
        cpu_w = {k: tree_cpu(p) - cpu0[k] for k, p in pids.items()}
        settled = settle(pids, args.settle)
        cpu = {k: tree_cpu(p) - cpu0[k] for k, p in pids.items()}
        tasks = worker_tasks(side.db, since)
    finally:
        stop(cluster, timeout=5)
        stop(web)
    ok = [w for w in writes if 0 < w.status < 300]
    failed = len(writes) - len(ok)
    if failed > 0.02 * max(len(writes), 1):
        statuses = sorted({w.status for w in writes if not 0 < w.status < 300})
        raise SystemExit(f"{side.name}: {failed} of {len(writes)} writes failed "
                         f"(HTTP {statuses}): the two sides are not serving the same load")
    served = max(len(ok), 1)
    return {
        "served": len(ok), "failed": failed, "never_sent": unsent,
        "window_secs": window, "settle_secs": settled,
        "rest_p50": pct([w.done - w.sent for w in ok], 0.5),
        "rest_p95": pct([w.done - w.sent for w in ok], 0.95),
        "ms_per_write": 1000 * sum(cpu.values()) / served,
        "ms_per_write_window": 1000 * sum(cpu_w.values()) / served,
        "ms_by_process": {k: 1000 * v / served for k, v in cpu.items()},
        "tasks": tasks,
        "load": os.getloadavg(),
    }


def line(side: Side, r: dict[str, Any]) -> str:
    parts = ", ".join(f"{k} {v:.1f}" for k, v in r["ms_by_process"].items())
    tasks = ", ".join(f"{k} {v}" for k, v in sorted(r["tasks"].items()))
    return (f"  {side.name:8} {r['served']} writes served ({r['failed']} failed, "
            f"{r['never_sent']} never sent) in {r['window_secs']:.0f}s + {r['settle_secs']:.0f}s "
            f"to idle; REST p50 {r['rest_p50'] or 0:.3f}s p95 {r['rest_p95'] or 0:.3f}s; "
            f"server CPU {r['ms_per_write']:.1f} ms/write ({parts}; window alone "
            f"{r['ms_per_write_window']:.1f}); worker tasks {tasks}  [load {r['load'][0]:.2f}]")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", required=True, metavar="REF", help="the commit to compare with")
    p.add_argument("--agents", type=positive_int, default=200)
    p.add_argument("--write-every", type=positive_int, default=5, metavar="SECS",
                   help="seconds between two writes of one agent (default 5)")
    p.add_argument("--seconds", type=positive_int, default=60, help="write window per turn")
    p.add_argument("--rounds", type=positive_int, default=2)
    p.add_argument("--claims", type=positive_int, default=1000)
    p.add_argument("--web-workers", type=positive_int, default=2)
    p.add_argument("--q-workers", type=positive_int, default=2)
    p.add_argument("--settle", type=positive_int, default=180, metavar="SECS",
                   help="longest wait for the side to go idle after its window (default 180)")
    p.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    return p.parse_args(argv)


def commit_of(ref: str) -> str:
    found = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                           cwd=ROOT, capture_output=True, text=True)
    if found.returncode != 0:
        raise SystemExit(f"--baseline {ref}: no such commit in this repository")
    return found.stdout.strip()


def main() -> None:
    args = parse()
    commit = commit_of(args.baseline)
    pg = postgres_pid()
    if pg is None:
        raise SystemExit("no Postgres process found to measure (is the database local?)")
    if settings.DATABASES["default"]["ENGINE"] not in ("ctxlake_site.embedded_pg",
                                                       "ctxlake_site.pooled_pg"):
        raise SystemExit("write_cpu_ab needs ctxlake's Postgres settings")
    out = sys.stderr if args.json else sys.stdout
    print(f"write_cpu_ab {time.strftime('%Y-%m-%d %H:%M')}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, baseline {args.baseline} ({commit[:7]}); {args.agents} "
          f"agents, one write each every {args.write_every}s for {args.seconds}s per turn  "
          f"[{load()}]",
          file=out, flush=True)
    tag = f"{os.getpid()}"
    with (tempfile.TemporaryDirectory(prefix="write-ab-") as tmp_name,
          baseline_checkout(commit, Path(tmp_name)) as worktree):
        tmp = Path(tmp_name)
        dbs = {name: f"bench_ab_{name}_{tag}" for name in ("baseline", "this")}
        sides = [Side(name, root, dbs[name], side_env(dbs[name], tmp, name))
                 for name, root in (("baseline", worktree), ("this", ROOT))]
        try:
            for s in sides:
                create_database(s.db)
                seed(s, args.agents, args.claims, out)
            for r in range(args.rounds):
                print(f"round {r + 1}/{args.rounds}  [{load()}]", file=out, flush=True)
                for s in (sides if r % 2 == 0 else sides[::-1]):
                    s.rounds.append(turn(s, args, pg))
                    print(line(s, s.rounds[-1]), file=out, flush=True)
        finally:
            for s in sides:
                drop_database(s.db)

    base, this = (statistics.median(r["ms_per_write"] for r in s.rounds) for s in sides)
    wins = sum(t["ms_per_write"] < b["ms_per_write"]
               for b, t in zip(sides[0].rounds, sides[1].rounds, strict=True))
    print(f"server CPU per write, median of {args.rounds}: baseline {base:.1f} ms, this "
          f"{this:.1f} ms ({this / base:.2f}×; lower in {wins} of {args.rounds} rounds)  "
          f"[{load()}]", file=out, flush=True)
    if args.json:
        print(json.dumps({"baseline": args.baseline, "ratio": this / base,
                          **{s.name: s.rounds for s in sides}}, indent=1))


if __name__ == "__main__":
    main()
