"""Capture bench: SessionEnd hook return time, and transcript extraction time and memory.

    /work/main/.venv/bin/python bench/capture_bench.py [--runs 30]

1. Hook: `python -m mcp_bridge hook session-end` with a real transcript on stdin, timed
   from spawn to exit (what the runtime waits for; the capture it starts runs detached),
   against a baseline measured in the same run: `python -c pass` spawned the same way.
   Target (issue 23): p50 and p95 at most 4x the baseline's.
2. Extraction: `python -m mcp_bridge capture-session` on a 1 MB, a 5 MB and a 20 MB Claude
   Code transcript (20 MB: an ordinary afternoon, as this CLI version repeats each request
   in the transcript), in a child process each, wall time and peak RSS (ru_maxrss of the
   child), against the same baseline spawn. Targets: <= 1 s, <= 3 s and <= 3 s.

Prints os.getloadavg() first: the machine is shared, so read figures against it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.mcp_bridge.test_capture import big_transcript  # noqa: E402
from tests.mcp_bridge.transcripts import error_fix_claude  # noqa: E402


def timed(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> tuple[float, int]:
    """(seconds from spawn to exit, the child's peak RSS in KiB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(argv, input=stdin, env=env, cwd=ROOT, capture_output=True, check=True)
    secs = time.perf_counter() - t0
    return secs, max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def ms(v: float) -> str:
    return f"{v * 1000:7.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()}  (cores: {os.cpu_count()})")
    work = Path(tempfile.mkdtemp(prefix="capture-bench-"))
    try:
        repo = work / "proj"
        (repo / "src").mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        env = {**os.environ, "CTXLAKE_HOME": str(work / "home"), "CTXLAKE_FLEET_ID": "bench",
               "CTXLAKE_AGENT_ID": "bench", "PYTHONPATH": str(ROOT)}
        # An installed hook runs from compiled bytecode; this sandbox sets
        # PYTHONDONTWRITEBYTECODE, which would add ~20 ms of compiling to every spawn.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        small = error_fix_claude(repo).write(work / "small.jsonl")

        def hook_run(i: int, **extra: str) -> float:
            stdin = json.dumps({"session_id": f"bench-{i}", "transcript_path": str(small),
                                "cwd": str(repo)}).encode()
            return timed([sys.executable, "-m", "mcp_bridge", "hook", "session-end"],
                         {**env, **extra}, stdin)[0]

        hook_run(-1)  # warm: writes the .pyc files
        time.sleep(1)
        rows: dict[str, list[float]] = {"base": [], "off": [], "on": []}
        for i in range(args.runs):  # interleaved, so load drifts hit all three alike
            rows["base"].append(timed([sys.executable, "-c", "pass"], env)[0])
            rows["off"].append(hook_run(i, CTXLAKE_CAPTURE="off"))
            rows["on"].append(hook_run(i))
        for key, label in (("on", "hook session-end, capture on"),
                           ("off", "peer: hook session-end, CTXLAKE_CAPTURE=off"),
                           ("base", "baseline: python -c pass")):
            print(f"{label:46} p50 {ms(statistics.median(rows[key]))}   "
                  f"p95 {ms(p95(rows[key]))}")
        for stat, f in (("p50", statistics.median), ("p95", p95)):
            ratio = f(rows["on"]) / f(rows["base"])
            print(f"capture-on {stat} / baseline {stat}: {ratio:.1f}x  (target <= 4x: "
                  f"{'met' if ratio <= 4 else 'MISSED'})")
        print(f"({args.runs} runs each, interleaved)")
        time.sleep(2)  # let the detached captures the hook started finish before timing more

        print("\nextraction (capture-session, one child each; 3 runs, median)")
        for mb, target in ((1, 1.0), (5, 3.0), (20, 3.0)):
            path = big_transcript(repo, work / f"t{mb}.jsonl", mb)
            runs = [timed([sys.executable, "-m", "mcp_bridge", "capture-session",
                           "--transcript", str(path), "--session", f"x{mb}-{n}",
                           "--cwd", str(repo)], env) for n in range(3)]
            secs = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs)
            print(f"  {path.stat().st_size / (1 << 20):4.1f} MB transcript   {secs:6.3f} s   "
                  f"peak RSS of a child so far {rss / 1024:6.1f} MiB   target <= {target} s: "
                  f"{'met' if secs <= target else 'MISSED'}")
        print(f"  baseline python -c pass          {statistics.median(rows['base']):6.3f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
