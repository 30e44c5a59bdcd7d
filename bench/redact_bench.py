"""What the redactor costs: per KiB of text, and on the bridge's write path.

    /work/main/.venv/bin/python bench/redact_bench.py [--kib 64] [--writes 300]

1. scrub_text (its engine, without the per-string cache) per KiB of (a) clean agent text
   (handoff notes, claims, paths, log lines),
   (b) look-alikes (the false-positive fixtures: placeholders, hashes, references) and
   (c) secret-dense text (the true-positive fixtures), called on ~1 KiB strings as the
   bridge and the drain call it. Peer in the same run: the previous redactor (the module
   at commit bde6d80, loaded from git) when git has it.
2. The bridge's write p50/p95: fleet_claim and memory_propose through mcp_bridge.tools
   over a real Spool (fsync included), interleaved with the same calls with the redactor
   replaced by the identity in the same process: the difference is the redactor's share.
   Target: write p50 <= 3 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp_bridge import tools  # noqa: E402
from mcp_bridge.config import Config  # noqa: E402
from mcp_bridge.contract import redact  # noqa: E402
from tests.mcp_bridge.redact_fixtures import FALSE_POSITIVES, TRUE_POSITIVES  # noqa: E402

WRITE_TARGET_MS = 3.0
PREVIOUS = "bde6d80"
CLEAN_LINES = [
    "Handoff: finished the lease refactor in fleet/leases.py; tests in tests/fleet pass.",
    "Next: review the REST docs for the claims endpoints and ask bo about the cache layout.",
    "The drain applies events in batches of 500; a poison line goes to the dead letters.",
    "src/components/settings/NotificationPreferences.tsx renders the per-fleet toggles.",
    "2026-12-03 10:00:00 INFO drain: 1200 events applied in 0.41s (fleet demo)",
    "pytest -x -q tests/site/test_drain.py::test_a_torn_line_waits_for_its_writer",
    "Decision: keep one redactor shared by the bridge and the server, stdlib only.",
    "git log --oneline -5 shows 3f2a9c1 as the merge of the search ranking branch.",
    "The snapshot is rebuilt into a new file and renamed over; never updated in place.",
    "Use select_for_update on the handoff row before the compare-and-swap on version.",
    "GET /api/v1/fleets/demo/handoffs?state=pending 200 512 0.004",
    "docker compose up -d postgres && ./ctxlake up --workers 2",
]


def _chunks(lines: list[str], kib: int) -> list[str]:
    """~1 KiB strings cycling through `lines`, `kib` of them."""
    out, buf, i = [], [], 0
    while len(out) < kib:
        buf.append(lines[i % len(lines)])
        i += 1
        if sum(len(x) + 1 for x in buf) >= 1024:
            out.append("\n".join(buf))
            buf = []
    return out


def _per_kib(scrub: Callable[[str], str], chunks: list[str], rounds: int = 3) -> float:
    """Best of `rounds` passes, in microseconds per KiB."""
    total_kib = sum(len(c.encode()) for c in chunks) / 1024
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for chunk in chunks:
            scrub(chunk)
        best = min(best, time.perf_counter() - start)
    return best / total_kib * 1e6


def _uncached(text: str) -> str:
    """scrub_text without its per-string cache (a repeated chunk would be a cache hit)."""
    return redact._redact(text, None, gated=True)


def _previous_redactor() -> types.ModuleType | None:
    try:
        source = subprocess.run(["git", "show", f"{PREVIOUS}:mcp_bridge/contract/redact.py"],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("previous_redact")
    exec(compile(source, f"{PREVIOUS}:redact.py", "exec"), module.__dict__)
    return module


def _write_bench(writes: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as home:
        config = Config.from_env({"CTXLAKE_HOME": home, "CTXLAKE_FLEET_ID": "bench",
                                  "CTXLAKE_AGENT_ID": "ada", "CTXLAKE_SESSION_ID": "s-1"})
        bridge = tools.Bridge.from_config(config)
        excerpt = " ".join(CLEAN_LINES)[:600]
        n = iter(range(10**9))  # every call writes new text: no scan-cache hit across calls
        calls: dict[str, Callable[[], Any]] = {
            "fleet_claim": lambda: tools.fleet_claim(
                bridge, paths=["src/app/leases.py", "src/app/views/**"],
                reason=f"refactor the lease view to one query (step {next(n)})"),
            "memory_propose": lambda: tools.memory_propose(
                bridge, claim="The drain applies events in batches; a poison line goes to "
                f"the dead letters and the batch is retried event by event ({next(n)}).",
                type="fact", subject="drain",
                evidence=[{"session_id": "s-1", "message_id": "m-1",
                           "path": "ctxlake_site/drain.py", "excerpt": f"{next(n)} {excerpt}"}]),
        }
        real = (redact.find_secrets, redact.scrub_value)
        seen: list[Any] = []  # the payloads the tools hand the redactor, timed alone below
        spy = (lambda value: seen.append(value) or real[0](value), real[1])
        identity = (lambda value: [], lambda value: value)
        times: dict[str, list[float]] = {f"{n} {m}": [] for n in calls
                                         for m in ("redactor", "identity")}
        for i in range(writes):
            for name, call in calls.items():
                modes = [("redactor", spy), ("identity", identity)]
                for mode, (find, scrub) in modes if i % 2 else modes[::-1]:  # ABBA order
                    redact.find_secrets, redact.scrub_value = find, scrub  # type: ignore[assignment]
                    try:
                        start = time.perf_counter()
                        call()
                        times[f"{name} {mode}"].append((time.perf_counter() - start) * 1000)
                    finally:
                        redact.find_secrets, redact.scrub_value = real
            if i % 100 == 99:
                bridge.spool.path.unlink(missing_ok=True)  # keep under the spool cap
        alone = []
        for value in seen:
            redact._scan_once.cache_clear()
            start = time.perf_counter()
            redact.find_secrets(value)
            redact.scrub_value(value)
            alone.append((time.perf_counter() - start) * 1000)
        times["redactor alone (same payloads)"] = alone
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kib", type=int, default=64, help="KiB of each text kind")
    parser.add_argument("--writes", type=int, default=300, help="calls per tool and mode")
    args = parser.parse_args()
    print(f"loadavg {os.getloadavg()}  python {sys.version.split()[0]}  "
          f"rules {redact.rule_count()}  fixtures {len(TRUE_POSITIVES)} TP / "
          f"{len(FALSE_POSITIVES)} FP")

    texts = {"clean agent text": _chunks(CLEAN_LINES, args.kib),
             "look-alikes (FP fixtures)": _chunks(FALSE_POSITIVES, args.kib),
             "secret-dense (TP fixtures)": _chunks([c.text for c in TRUE_POSITIVES], args.kib)}
    previous = _previous_redactor()
    print("\nscrub_text, microseconds per KiB (best of 3; ~1 KiB strings)")
    print(f"  {'text':30} {'this redactor':>14} {'previous (' + PREVIOUS + ')':>20}")
    for name, chunks in texts.items():
        ours = _per_kib(_uncached, chunks)
        theirs = f"{_per_kib(previous.scrub_text, chunks):20.0f}" if previous else f"{'n/a':>20}"
        print(f"  {name:30} {ours:14.0f} {theirs}")

    print(f"\nbridge write path (mcp_bridge.tools over a real Spool, fsync included), "
          f"{args.writes} calls each, interleaved")
    times = _write_bench(args.writes)
    print(f"  {'call':34} {'p50 ms':>8} {'p95 ms':>8}")
    for name, values in times.items():
        values.sort()
        p95 = values[int(len(values) * 0.95) - 1]
        print(f"  {name:34} {statistics.median(values):8.3f} {p95:8.3f}")
    worst = max(statistics.median(v) for k, v in times.items() if k.endswith(" redactor"))
    for tool in ("fleet_claim", "memory_propose"):
        share = (statistics.median(times[f"{tool} redactor"])
                 - statistics.median(times[f"{tool} identity"]))
        print(f"  redactor's share of {tool} p50: {share:+.3f} ms")
    verdict = "met" if worst <= WRITE_TARGET_MS else "NOT met"
    print(f"\ntarget: write p50 <= {WRITE_TARGET_MS} ms with the redactor: {worst:.3f} ms, "
          f"{verdict}")


if __name__ == "__main__":
    main()
