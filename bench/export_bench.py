"""Bench: export_fleet and import_fleet of a 10k-claim fleet, against pg_dump of the tables.

Run standalone: `.venv/bin/python bench/export_bench.py [--claims N]`. It uses the
configured database (the embedded Postgres by default; run `manage.py migrate` first),
seeds a throwaway fleet — N claims (60% proposed, 20% promoted, 10% rejected, 10%
retracted), two citations each, their events, 400 sessions of 8 agents, 50 handoffs —
vacuums, and then times, each in a process of its own (wall seconds, peak RSS from the
kernel's accounting of that child):

1. `manage.py export_fleet` into a new directory;
2. baseline: `pg_dump --data-only` of the same seven tables (fleet, agent, session,
   handoff, claim, evidence, claim event: every fleet's rows, there is no per-fleet dump);
3. `manage.py import_fleet --fleet` of that export into a new fleet;
4. baseline: `psql` restoring that dump into a scratch database holding the tables'
   schema (indexes and constraints included).

Everything it made (the fleets, the user, the scratch database, the files) is removed
afterwards, even on failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from claims.models import Claim, ClaimEvent, Evidence, text_hash  # noqa: E402
from ctxlake_site import db_health, embedded_db  # noqa: E402
from fleet.models import Agent, Fleet, Handoff, Session  # noqa: E402

TABLES = ("fleet_fleet", "fleet_agent", "fleet_session", "fleet_handoff", "claims_claim",
          "claims_evidence", "claims_claimevent")
STATUSES = ["proposed"] * 6 + ["promoted"] * 2 + ["rejected", "retracted"]
SUBJECTS = [f"subject {i:02d}" for i in range(40)]
TYPES = Claim.Type.values


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def _claim(fleet: Fleet, i: int, agents: list[Agent], now: object) -> Claim:
    status = STATUSES[i % len(STATUSES)]
    text = (f"Claim {i}: the {SUBJECTS[i % 40]} step needs {i % 97} retries and "
            f"RUST_LOG=debug before the integration run in module m{i % 311}.")
    return Claim(fleet=fleet, number=i, text=text, text_hash=text_hash(text),
                 type=TYPES[i % len(TYPES)], subject=SUBJECTS[i % 40],
                 status=status, scope="fleet" if status == "promoted" else "agent",
                 promoted_at=now if status == "promoted" else None,
                 proposed_by=agents[i % 8], independent_sessions=2, confidence=0.5)


def _events(claim: Claim, user: User) -> list[ClaimEvent]:
    kinds = {"proposed": [], "promoted": ["promoted"], "rejected": ["rejected"],
             "retracted": ["promoted", "retracted"]}[claim.status]
    return [ClaimEvent(claim=claim, kind="proposed", actor_agent=claim.proposed_by),
            *(ClaimEvent(claim=claim, kind=k, actor_user=user, note="bench") for k in kinds)]


def seed(slug: str, n: int, user: User) -> Fleet:
    now = timezone.now()
    fleet = Fleet.objects.create(slug=slug, name="export bench", claim_seq=n)
    agents = Agent.objects.bulk_create(
        [Agent(fleet=fleet, agent_id=f"agent-{a}", runtime="claude-code") for a in range(8)])
    Session.objects.bulk_create(
        [Session(fleet=fleet, agent=agents[s % 8], session_id=f"s-{s}", repo="acme/shop",
                 summary=f"session {s} worked on the refund flow", outcome="success",
                 started_at=now - timedelta(hours=s), ended_at=now) for s in range(400)])
    Handoff.objects.bulk_create(
        [Handoff(fleet=fleet, from_agent=agents[h % 8], summary=f"handoff {h}: half done",
                 next_steps="finish it") for h in range(50)])
    for start in range(1, n + 1, 2000):
        claims = Claim.objects.bulk_create(
            [_claim(fleet, i, agents, now) for i in range(start, min(start + 2000, n + 1))])
        Evidence.objects.bulk_create(
            [Evidence(claim=c, session_id=f"s-{(c.number + k * 7) % 400}",
                      message_id=f"m-{c.number}-{k}", repo="acme/shop",
                      path=f"src/m{c.number % 311}.py", excerpt="retry budget exhausted")
             for c in claims for k in (0, 1)])
        ClaimEvent.objects.bulk_create([e for c in claims for e in _events(c, user)])
    return fleet


def measure(argv: Sequence[str], **kw: object) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process. The RSS is GNU time's (%M):
    a child forked from this process would count our own pages until its exec."""
    with tempfile.NamedTemporaryFile("r") as report:
        started = time.perf_counter()
        subprocess.run(["/usr/bin/time", "-f", "%M", "-o", report.name, *argv], check=True,
                       stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
        elapsed = time.perf_counter() - started
        peak_kib = int(report.read().split()[-1])
    return elapsed, peak_kib / 1024


def pg(program: str) -> str:
    """The program of the server we use: the embedded one's, or the PATH's otherwise."""
    if connection.settings_dict["ENGINE"] == "ctxlake_site.embedded_pg":
        return str(embedded_db.bin_dir() / program)
    return shutil.which(program) or program


def pg_args(dbname: str) -> list[str]:
    params = connection.get_connection_params()
    args = ["-h", str(params["host"]), "-U", str(params.get("user") or "postgres")]
    if params.get("port"):
        args += ["-p", str(params["port"])]
    return [*args, "-d", dbname]


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def pg_env() -> dict[str, str]:
    password = connection.get_connection_params().get("password")
    return {**os.environ, **({"PGPASSWORD": str(password)} if password else {})}


def restore_baseline(dump: Path, work: Path) -> tuple[float, float]:
    """psql of the data-only dump into a scratch database with the tables' schema."""
    scratch = f"bench_restore_{uuid.uuid4().hex[:8]}"
    dbname = str(connection.get_connection_params()["dbname"])
    schema = work / "schema.sql"
    with connection.cursor() as cur:
        cur.execute(f"CREATE DATABASE {scratch}")
    try:
        subprocess.run([pg("pg_dump"), *pg_args(dbname), "--schema-only", "-f", str(schema),
                        *(f"--table={t}" for t in TABLES)], check=True, env=pg_env())
        quiet = {"stderr": subprocess.DEVNULL, "env": pg_env()}
        subprocess.run([pg("psql"), *pg_args(scratch), "-q", "-c", "CREATE EXTENSION vector"],
                       check=True, stdout=subprocess.DEVNULL, **quiet)  # type: ignore[call-overload]
        # foreign keys to tables not dumped (users, tokens) fail to create: left out
        subprocess.run([pg("psql"), *pg_args(scratch), "-q", "-f", str(schema)],
                       stdout=subprocess.DEVNULL, **quiet)  # type: ignore[call-overload]
        return measure([pg("psql"), *pg_args(scratch), "-q", "-v", "ON_ERROR_STOP=1",
                        "-f", str(dump)], env=pg_env())
    finally:
        with connection.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {scratch} WITH (FORCE)")


def run(n: int, work: Path, user: User) -> None:
    slug = f"bench-export-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    seed(slug, n, user)
    print(f"seeded {slug}: {n} claims, {2 * n} citations, "
          f"{ClaimEvent.objects.filter(claim__fleet__slug=slug).count()} events, 400 sessions, "
          f"50 handoffs in {time.perf_counter() - started:.1f} s")
    db_health.vacuum()
    print(f"vacuumed; {load()}")
    start_s, start_mb = measure(manage("export_fleet", "--help"))
    print(f"start-up     : {start_s:6.2f} s, peak RSS {start_mb:6.1f} MiB "
          "(manage.py export_fleet --help: Django and the command, no work)")
    dbname = str(connection.get_connection_params()["dbname"])
    export_s, export_mb = measure(manage("export_fleet", slug, "--out", str(work / "export")))
    dump = work / "dump.sql"
    # (pg_dump warns that claims_claim refers to itself; the restore below copes)
    dump_s, dump_mb = measure([pg("pg_dump"), *pg_args(dbname), "--data-only", "-f", str(dump),
                               *(f"--table={t}" for t in TABLES)], env=pg_env(),
                              stderr=subprocess.DEVNULL)
    size = sum(p.stat().st_size for p in (work / "export").iterdir())
    print(f"export_fleet : {export_s:6.2f} s, peak RSS {export_mb:6.1f} MiB, "
          f"{size / 1e6:.1f} MB of files")
    print(f"pg_dump      : {dump_s:6.2f} s, peak RSS {dump_mb:6.1f} MiB, "
          f"{dump.stat().st_size / 1e6:.1f} MB (every fleet's rows of the 7 tables: "
          f"{Claim.objects.count()} claims); export/pg_dump {export_s / dump_s:.1f}×")
    db_health.vacuum()
    import_s, import_mb = measure(manage("import_fleet", str(work / "export"), "--fleet",
                                         slug + "-copy", "--quiet"))
    print(f"import_fleet : {import_s:6.2f} s, peak RSS {import_mb:6.1f} MiB; {load()}")
    try:
        restore_s, restore_mb = restore_baseline(dump, work)
        print(f"psql restore : {restore_s:6.2f} s, peak RSS {restore_mb:6.1f} MiB; "
              f"import/restore {import_s / restore_s:.1f}×")
    except subprocess.CalledProcessError as exc:
        print(f"psql restore : skipped ({exc})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=int, default=10_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ctxlake-export-bench-"))
    user = User.objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    try:
        print(f"export bench, {args.claims} claims; {load()}")
        run(args.claims, work, user)
    finally:
        Fleet.objects.filter(slug__startswith="bench-export-").delete()
        user.delete()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
