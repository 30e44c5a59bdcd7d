"""Is the shared embedder fair? 20 ordinary clients' latency with and without clients that
drip a byte at a time, against one real service process in the same run.

    /work/main/.venv/bin/python bench/embed_fairness.py [--clients 20] [--requests 20]

Target (issue 29): the ordinary clients' p95 with 3 dripping clients within 20 % of their
p95 without them. Prints the load average and the date.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp_bridge import embed_service, socket_io  # noqa: E402
from mcp_bridge.contract import embed  # noqa: E402


def _ordinary(home: Path, clients: int, requests: int) -> list[float]:
    timings: list[float] = []
    lock = threading.Lock()

    def one(n: int) -> None:
        for i in range(requests):
            start = time.perf_counter()
            embed_service.query_vector(home, embed.NAME, embed.DIMS, f"query {n} {i}")
            with lock:
                timings.append((time.perf_counter() - start) * 1000)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return timings


def _drippers(path: Path, n: int, stop: threading.Event) -> list[threading.Thread]:
    def drip() -> None:
        while not stop.is_set():  # reconnect after each cut-off: a client that keeps at it
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s, \
                    socket_io.address(path) as address:
                s.connect(address)
                s.settimeout(0.2)
                while not stop.is_set():
                    try:
                        s.sendall(b"{")
                        s.recv(4096)
                        break
                    except TimeoutError:
                        continue
                    except OSError:
                        break

    threads = [threading.Thread(target=drip, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--drippers", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        embed_service.query_vector(home, embed.NAME, embed.DIMS, "warm", start_wait=60)
        path = embed_service.socket_path(home, embed.NAME)
        p95 = {}
        for label, drippers in (("without", 0), ("with", args.drippers), ("without again", 0)):
            stop = threading.Event()
            _drippers(path, drippers, stop)
            timings = _ordinary(home, args.clients, args.requests)
            stop.set()
            p95[label] = statistics.quantiles(timings, n=20)[18]
            print(f"  {label:14} {drippers} dripping: p50 {statistics.median(timings):7.2f} ms"
                  f"  p95 {p95[label]:7.2f} ms  ({len(timings)} requests)")
        base = max(p95["without"], p95["without again"])
        ratio = p95["with"] / base
        print(f"embed_fairness {dt.datetime.now(dt.UTC).date()} · load average "
              f"{os.getloadavg()[0]:.2f} · {args.clients} clients × {args.requests} requests")
        print(f"  p95 with drippers / without: {ratio:.2f} (target <= 1.20: "
              f"{'met' if ratio <= 1.2 else 'MISSED'})")
        for pid in embed_service.running(home):
            os.kill(pid, 15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
