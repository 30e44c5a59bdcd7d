"""What recording served claims costs memory_search: p50/p95 with the claim.served record
against the same searches with the record switched off, interleaved in one process.

    /work/main/.venv/bin/python bench/served_bench.py [--claims 10000] [--searches 400]

A real snapshot (mcp_bridge.testing.build_cache, seeded random vectors so the vector list
is exercised without loading the model), the bridge's own tool layer over it and its real
Spool: every searched answer queues its ids, and the writer thread spools them (lock,
write, fsync) while the next search runs. The baseline is the same Bridge with the served
record's `note` replaced by a no-op, alternating call by call so load drifts hit both
sides alike. Target (issue 24): overhead on the p50 <= 5 %.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp_bridge import testing, tools  # noqa: E402
from mcp_bridge.config import Config  # noqa: E402
from mcp_bridge.contract import embed  # noqa: E402

TARGET = 0.05
WORDS = [
    "payments", "tests", "stripe", "webhook", "retry", "refund", "migration", "cache",
    "lease", "render", "drain", "spool", "claim", "session", "handoff", "docker", "postgres",
    "redis", "timeout", "flaky", "import",
]


def _claims(n: int, rng: random.Random) -> list[dict[str, Any]]:
    return [testing.claim(f"cc-{i:05d}", " ".join(rng.choices(WORDS, k=12)),
                          subject=rng.choice(WORDS)) for i in range(1, n + 1)]


def _bridge(home: Path, claims: list[dict[str, Any]]) -> tools.Bridge:
    testing.build_cache(home / "cache", "bench", claims=claims, vectors="random")
    cfg = Config.from_env({"CTXLAKE_HOME": str(home), "CTXLAKE_CACHE_DIR": str(home / "cache"),
                           "CTXLAKE_SPOOL_DIR": str(home / "spool"), "CTXLAKE_FLEET_ID": "bench",
                           "CTXLAKE_AGENT_ID": "bench", "CTXLAKE_SESSION_ID": "bench-1"})
    return tools.Bridge.from_config(cfg)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--claims", type=int, default=10_000)
    ap.add_argument("--searches", type=int, default=400)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    os.environ["CTXLAKE_EMBED_SHARED"] = "off"
    with tempfile.TemporaryDirectory() as tmp:
        bridge = _bridge(Path(tmp), _claims(args.claims, rng))
        on, off = bridge.served.note, (lambda *_a, **_k: None)
        queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(args.searches)]
        vector = embed.embed_query(queries[0])  # load the query embedder before timing
        del vector
        for q in queries[:20]:  # warm the snapshot's indexes on both sides
            bridge.call("memory_search", {"query": q})
        timings: dict[str, list[float]] = {"served": [], "baseline": []}
        for i, q in enumerate(queries):
            side = "served" if i % 2 == 0 else "baseline"
            bridge.served.note = on if side == "served" else off  # type: ignore[method-assign]
            start = time.perf_counter()
            bridge.call("memory_search", {"query": q, "k": 10})
            timings[side].append((time.perf_counter() - start) * 1000)
        bridge.served.flush()
        _report(args, timings, bridge.served.written)
    return 0


def _report(args: Any, timings: dict[str, list[float]], written: int) -> None:
    p50 = {k: statistics.median(v) for k, v in timings.items()}
    p95 = {k: statistics.quantiles(v, n=20)[18] for k, v in timings.items()}
    overhead = p50["served"] / p50["baseline"] - 1
    day = dt.datetime.now(dt.UTC).date()
    print(f"served_bench {day} · load average {os.getloadavg()[0]:.2f} · "
          f"{args.claims} claims · {args.searches} searches (half each side) · seed {args.seed}")
    for side in ("baseline", "served"):
        print(f"  {side:9} p50 {p50[side]:7.2f} ms   p95 {p95[side]:7.2f} ms")
    print(f"  served events written: {written}")
    verdict = "met" if overhead <= TARGET else "MISSED"
    print(f"  overhead on p50: {overhead * 100:+.1f} % (target <= {TARGET * 100:.0f} %: {verdict})")


if __name__ == "__main__":
    raise SystemExit(main())
