"""Host token bench: what checking each line against a host token's list costs the upload.

Same run, same database, a throwaway fleet (deleted at the end) with `--agents` agents:
each round admits one batch of `--lines` spool lines through `fleet.api_spool.receive`
three ways, interleaved so load drifts hit all three alike:
1. agent token (the baseline): every line from its one agent;
2. host token listing every agent: the lines spread over all of them;
3. the same host token, with one line in ten naming an agent it does not list (refused).
Printed: p50 and p95 ms per batch and µs per line, the ratio to the baseline, and the load
average before and after. No HTTP: the figure is the server's own work per upload.

    CTXLAKE_HOME=… .venv/bin/python bench/host_token_bench.py [--rounds 15] [--lines 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

from fleet import api_spool, tokens  # noqa: E402
from fleet.models import Agent, ApiToken, Fleet  # noqa: E402


def load() -> str:
    return "load {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def line(fleet: str, agent: str, n: int) -> bytes:
    event = {"v": 1, "id": str(uuid.uuid4()), "kind": "lease.claim", "fleet": fleet,
             "agent": agent, "session": f"s-{agent}", "at": "2026-12-04T00:00:00Z",
             "payload": {"paths": [f"src/{agent}/{n}.py"], "reason": "bench", "ttl_secs": 600}}
    return json.dumps(event).encode()


def batch(fleet: str, names: list[str], size: int) -> list[bytes]:
    return [line(fleet, names[n % len(names)], n) for n in range(size)]


def timed(fleet: Fleet, token: ApiToken, lines: list[bytes]) -> tuple[float, int, int]:
    started = time.perf_counter()
    out = api_spool.receive(fleet, lines, speakers=tokens.speakers(token))
    return time.perf_counter() - started, len(out.accepted), len(out.rejected)


def report(name: str, secs: list[float], lines: int, base: float | None) -> float:
    p50 = statistics.median(secs)
    p95 = sorted(secs)[max(0, round(0.95 * len(secs)) - 1)]
    ratio = f", {p50 / base:.2f}× the baseline" if base else " (baseline)"
    print(f"  {name:<34} p50 {p50 * 1000:7.1f} ms  p95 {p95 * 1000:7.1f} ms  "
          f"{p50 / lines * 1e6:6.1f} µs/line{ratio}")
    return p50


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--agents", type=int, default=50)
    a = ap.parse_args()
    slug = f"bench-host-{uuid.uuid4().hex[:8]}"
    fleet = Fleet.objects.create(slug=slug, name=slug)
    try:
        names = [f"agent-{i}" for i in range(a.agents)]
        agents = Agent.objects.bulk_create([Agent(fleet=fleet, agent_id=n) for n in names])
        Agent.objects.create(fleet=fleet, agent_id="elsewhere")
        one = tokens.issue_token(fleet, role="agent", name="one", agent=agents[0]).token
        host = tokens.issue_token(fleet, role="host", name="host", relays=agents).token
        mixed_names = names[:9] + ["elsewhere"]  # one line in ten refused
        print(f"host token bench: {a.rounds} rounds of {a.lines} lines, {a.agents} agents; "
              f"{load()}")
        runs: dict[str, list[float]] = {"agent": [], "host": [], "mixed": []}
        for _ in range(a.rounds):
            for name, token, who in (("agent", one, names[:1]), ("host", host, names),
                                     ("mixed", host, mixed_names)):
                secs, accepted, rejected = timed(fleet, token, batch(slug, who, a.lines))
                assert accepted + rejected == a.lines
                assert rejected == (a.lines // 10 if name == "mixed" else 0), (name, rejected)
                runs[name].append(secs)
        base = report("agent token, one agent", runs["agent"], a.lines, None)
        report(f"host token, {a.agents} listed agents", runs["host"], a.lines, base)
        report("host token, 1 in 10 lines refused", runs["mixed"], a.lines, base)
        print(f"  after: {load()}")
    finally:
        fleet.delete()


if __name__ == "__main__":
    main()
