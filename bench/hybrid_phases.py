"""Where a bridge's hybrid search for a new query spends its time, phase by phase, at 10k
claims, beside the whole `memory_search` tool for new queries.

    /work/main/.venv/bin/python bench/hybrid_phases.py [--claims 10000] [--queries 200]
        [--gap MS] [--pin]

A synthetic snapshot (mcp_bridge.testing: Zipf-like texts, random unit vectors — the cost
of a dot product does not depend on meaning) and known-item queries built as bridge_bench
builds them (two words of a claim), each asked once: every query is new to both embedders
(the host's shared one over its unix socket, and the one in this process), so each pays
its embedding. Phases, each timed alone on its own new queries:

- embed, shared: embed_service.query_vector (connect, send, the service's model, read)
- embed, in-process: mcp_bridge.contract.embed.embed_query
- lexical: Snapshot._lexical (FTS5 BM25, conjunctive then any-term, coverage counts)
- vector: Snapshot._vector (numpy: the matrix product, the filter mask, the top n)
- rows + fusion: Snapshot._rows of both lists' ids and ranking.fuse

then the search with the shared embedder both ways, query by query in turn: the request
sent first and the vector read after the lexical list (shipped), and the vector awaited
before searching (the order before); then the whole `memory_search` tool, known-item and
broad (three common words), with each embedder. numpy runs with one BLAS thread, as
`python -m mcp_bridge` sets it (without that, OpenBLAS' worker threads made a 1 ms matrix
product cost ~20 ms inside the tool on this loaded machine). The load average is printed
beside every figure: the machine is shared, so only figures from the same run compare.

--gap MS idles before each timed query, as an agent's queries come seconds apart (back to
back, both processes stay on warm CPUs); the asked-first line counts the searches whose
vector the embedder computed on the asking process's own CPU, where it cannot overlap
the lexical list. --pin puts the two on different CPUs, to show what the overlap gives
when they are kept apart (docs/search.md).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp_bridge.__main__ import _SINGLE_THREAD  # noqa: E402

for _name in _SINGLE_THREAD:  # as `serve` does, before numpy loads: one BLAS thread
    os.environ.setdefault(_name, "1")

import machine  # noqa: E402

from mcp_bridge import embed_service, testing, tools  # noqa: E402
from mcp_bridge.config import Config  # noqa: E402
from mcp_bridge.contract import embed, ranking  # noqa: E402


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def p50(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    return f"p50 {statistics.median(ms):6.2f} ms  p95 {ms[int(len(ms) * 0.95) - 1]:6.2f} ms"


def queries(claims: list[dict[str, Any]], count: int, seed: int, *,
            broad: bool = False) -> list[str]:
    """Known-item queries (two words of a claim) or broad ones (three common engineering
    words: thousands of any-term matches at 10k), all different."""
    rng, out, seen = random.Random(seed), [], set()
    common = testing._DOMAIN.split()
    while len(out) < count:
        terms = (rng.sample(common, 3) if broad
                 else ranking.query_terms(rng.choice(claims)["text"]))
        q = " ".join(terms if broad else rng.sample(terms, min(2, len(terms))))
        if q and q not in seen:
            seen.add(q)
            out.append(q)
    return out


#: --gap: seconds of idle before each timed query (an agent's queries come seconds apart)
GAP = 0.0


def timed(fn: Callable[[str], Any], qs: list[str]) -> list[float]:
    out = []
    for q in qs:
        time.sleep(GAP)
        t = time.perf_counter()
        fn(q)
        out.append(time.perf_counter() - t)
    return out


def cpu_of(pid: int | str) -> int:
    """The CPU `pid` ("self": this process) last ran on (/proc/PID/stat, field 39)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[36])


def pin_apart(home: Path) -> None:
    """--pin: this process on CPU 0, the host's embedder on CPU 1 (every thread of each):
    what the overlap gives when the scheduler cannot put the two on one CPU."""
    for pid in embed_service.running(home):
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), {1})
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {0})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--gap", type=float, default=0.0, metavar="MS",
                        help="idle before each timed query, in ms (default 0: back to back)")
    parser.add_argument("--pin", action="store_true",
                        help="pin this process to CPU 0 and the host's embedder to CPU 1")
    args = parser.parse_args()
    if args.pin and not {0, 1} <= os.sched_getaffinity(0):
        parser.error("--pin needs CPUs 0 and 1")
    global GAP
    GAP = args.gap / 1000
    print(f"python {sys.version.split()[0]}, {machine.describe()}, load {loadavg()}")
    claims = testing.synthetic_claims(args.claims)
    pool = queries(claims, args.queries * 7, seed=args.claims)
    qs = [pool[i * args.queries:(i + 1) * args.queries] for i in range(7)]
    wide = queries(claims, args.queries * 5, seed=args.claims + 1, broad=True)
    qs += [wide[i * args.queries:(i + 1) * args.queries] for i in range(5)]  # 7..11
    with tempfile.TemporaryDirectory(prefix="hybrid-phases-") as tmp:
        root = Path(tmp)
        testing.build_cache(root / "cache", "bench", claims=claims, vectors="random")
        env = {"CTXLAKE_HOME": str(root / "home"), "CTXLAKE_CACHE_DIR": str(root / "cache"),
               "CTXLAKE_SPOOL_DIR": str(root / "spool"), "CTXLAKE_FLEET_ID": "bench",
               "CTXLAKE_AGENT_ID": "bench", "CTXLAKE_EMBED_SHARED": "on"}
        os.environ.update(env)
        b = tools.Bridge.from_config(Config.from_env(env))
        home = Path(env["CTXLAKE_HOME"])
        try:
            return run(b, home, qs, pin=args.pin)
        finally:
            for pid in embed_service.running(home):
                os.kill(pid, 15)


def run(b: tools.Bridge, home: Path, qs: list[list[str]], *, pin: bool) -> int:
    snap = b.cache.snapshot().value
    now = dt.datetime.now(dt.UTC)
    embed.embed_query("warm the in-process model")
    embed_service.query_vector(home, embed.NAME, embed.DIMS, "start the shared embedder")
    snap.search("warm", k=10, query_vector=embed.embed_query("warm the in-process model"))
    if pin:
        pin_apart(home)
    service = embed_service.running(home)[0]
    print(f"snapshot: {snap.count} claims; queries: {len(qs[0])} new ones per figure; "
          f"{GAP * 1000:g} ms idle before each; "
          f"{'pinned apart' if pin else 'placed by the scheduler'}")

    shared = timed(lambda q: embed_service.query_vector(home, embed.NAME, embed.DIMS, q), qs[0])
    print(f"{'embed, shared embedder (unix socket)':40} {p50(shared)}  [load {loadavg()}]")
    inproc = timed(embed.embed_query, qs[1])
    print(f"{'embed, in-process':40} {p50(inproc)}  [load {loadavg()}]")
    lexical = timed(lambda q: snap._lexical(q, 10, now, None, None, None), qs[2])
    print(f"{'lexical (FTS5 BM25 + coverage)':40} {p50(lexical)}  [load {loadavg()}]")
    lexical = timed(lambda q: snap._lexical(q, 10, now, None, None, None), qs[7])
    print(f"{'lexical, broad queries':40} {p50(lexical)}  [load {loadavg()}]")
    vectors = {q: embed.embed_query(q) for q in qs[2]}  # embedded before timing
    vector = timed(lambda q: snap._vector(vectors[q], 10, now, None, None, None), qs[2])
    print(f"{'vector (numpy scan of the matrix)':40} {p50(vector)}  [load {loadavg()}]")

    def rows_and_fusion(q: str) -> None:
        lex, cover = snap._lexical(q, 10, now, None, None, None)
        vec = snap._vector(vectors[q], 10, now, None, None, None)
        t = time.perf_counter()
        rows = snap._rows([*lex, *vec])
        ids = {r: row["id"] for r, row in rows.items()}
        ranking.fuse([ids[r] for r in lex if r in ids], [ids[r] for r in vec if r in ids],
                     {row["id"]: tools_factors(row, now) for row in rows.values()},
                     coverage={ids[r]: c for r, c in cover.items() if r in ids})
        fused.append(time.perf_counter() - t)

    fused: list[float] = []
    for q in qs[2]:
        time.sleep(GAP)
        rows_and_fusion(q)
    print(f"{'rows + fusion':40} {p50(fused)}  [load {loadavg()}]")

    # The search with the shared embedder, the two orders query by query in turn on new
    # queries: asking first and reading the vector after the lexical list (shipped), and
    # waiting for the vector before searching (the order before issue 29's overlap).
    for label, first, second in (("known-item", qs[4], qs[6]), ("broad", qs[9], qs[11])):
        overlapped: list[float] = []
        in_turn: list[float] = []
        beside = 0  # searches whose vector the embedder computed on this process's CPU
        for q1, q2 in zip(first, second, strict=True):
            time.sleep(GAP)
            t = time.perf_counter()
            with embed_service.ask(home, embed.NAME, embed.DIMS, q1) as asked:
                mine = cpu_of("self")
                snap.search(q1, k=10, query_vector=asked.vector)
            overlapped.append(time.perf_counter() - t)
            beside += cpu_of(service) == mine
            time.sleep(GAP)
            t = time.perf_counter()
            snap.search(q2, k=10, query_vector=embed_service.query_vector(
                home, embed.NAME, embed.DIMS, q2))
            in_turn.append(time.perf_counter() - t)
        print(f"{'search, shared embedder, ' + label + ', asked first':58} {p50(overlapped)}"
              f"  [load {loadavg()}]; the embedder on this CPU in {beside} of {len(first)}")
        print(f"{'search, shared embedder, ' + label + ', vector first':58} {p50(in_turn)}"
              f"  ({statistics.median(overlapped) / statistics.median(in_turn):.2f}x)")

    # The whole tool, each query new: what the phases above leave is the answer's own
    # work (attribution, sanitising every field, the rendered text, the served record).
    for label, index in (("shared embedder", 3), ("in-process embedder", 5),
                         ("shared embedder, broad queries", 8),
                         ("in-process embedder, broad queries", 10)):
        os.environ["CTXLAKE_EMBED_SHARED"] = "off" if label.startswith("in-process") else "on"
        whole = timed(lambda q: check(tools.memory_search(b, q)), qs[index])
        print(f"{'memory_search, new query, ' + label:58} {p50(whole)}  [load {loadavg()}]")
    return 0


def check(result: dict[str, Any]) -> None:
    assert result["mode"] == "hybrid" and result["results"], result


def tools_factors(row: dict[str, Any], now: dt.datetime) -> ranking.Factors:
    from mcp_bridge import snapshot

    return snapshot._factors(row, now)


if __name__ == "__main__":
    sys.exit(main())
