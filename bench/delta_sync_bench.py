"""Delta sync vs a full download of snapshot.sqlite, at 10k and 100k claims, same run.

For each size: a render (the reference writer, synthetic claims, random unit vectors, one
timeline row per claim) sealed as version 1; the next render changes ~1 % of the claims
(0.5 % edited with new vectors, 0.25 % retired, 0.25 % added) and is sealed as version 2
with its delta (mcp_bridge.contract.delta, the functions fleet.artifacts.record_snapshot
calls). A stdlib HTTP server on loopback serves them with the REST API's paths, and the
real `mcp_bridge.sync.pull` brings (a) a host holding version 1 up by the delta and (b) a
fresh host by a full download. Figures: bytes fetched and wall time per sync; the
server's cost of sealing and diffing a render; a check that both hosts end identical.
Loopback has no bandwidth limit, so on a real network the full download's time grows
with its bytes far more than here.

    .venv/bin/python bench/delta_sync_bench.py [--sizes 10000 100000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import http.server
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp_bridge import contract, sync  # noqa: E402
from mcp_bridge.contract import delta, embed  # noqa: E402
from mcp_bridge.snapshot import Snapshot  # noqa: E402
from mcp_bridge.testing import synthetic_claims, write_snapshot  # noqa: E402

FLEET = "bench"


def _change(v1: Path, v2: Path, n: int) -> int:
    """The next render: ~1 % of n claims changed; how many rows changed."""
    shutil.copy(v1, v2)
    db = sqlite3.connect(v2)
    rng = np.random.default_rng(11)
    picks = rng.choice(np.arange(1, n + 1), size=max(3, n // 100 * 3 // 4), replace=False)
    edited, retired = picks[: len(picks) * 2 // 3], picks[len(picks) * 2 // 3 :]
    for rowid in edited.tolist():
        db.execute(
            "UPDATE claims SET text = text || ' (edited)', confidence = 0.5 WHERE rowid = ?",
            (rowid,),
        )
        v = rng.standard_normal(embed.DIMS).astype("<f4")
        db.execute(
            "UPDATE embeddings SET vector = ? WHERE rowid = ?",
            ((v / np.linalg.norm(v)).astype("<f4").tobytes(), rowid),
        )
    marks = ",".join("?" * len(retired))
    db.execute(f"DELETE FROM embeddings WHERE rowid IN ({marks})", retired.tolist())
    db.execute(f"DELETE FROM claims WHERE rowid IN ({marks})", retired.tolist())
    added = synthetic_claims(max(1, n // 400), seed=99)
    for i, c in enumerate(added, start=n + 1):
        db.execute(
            "INSERT INTO claims (rowid, id, text, type, subject, scope, status, "
            "confidence, independent_sessions, created_at, promoted_at) VALUES "
            "(?, ?, ?, ?, ?, 'fleet', 'promoted', ?, ?, ?, ?)",
            (
                i,
                f"cc-{i}",
                c["text"],
                c["type"],
                c["subject"],
                c["confidence"],
                c["independent_sessions"],
                c["created_at"],
                c["promoted_at"],
            ),
        )
        v = rng.standard_normal(embed.DIMS).astype("<f4")
        db.execute(
            "INSERT INTO embeddings VALUES (?, ?)",
            (i, (v / np.linalg.norm(v)).astype("<f4").tobytes()),
        )
    db.execute(contract.SNAPSHOT_FTS_REBUILD)
    db.commit()
    db.execute("VACUUM")
    db.close()
    return len(edited) + len(retired) + len(added)


class _Server(http.server.ThreadingHTTPServer):
    files: dict[str, bytes]
    delta_body: bytes


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        tail = self.path.split(f"/fleets/{FLEET}/", 1)[1]
        files = self.server.files
        if tail == "cache/manifest":
            listing = [{"name": k, "etag": _etag(v), "size": len(v)} for k, v in files.items()]
            body = json.dumps(
                {"manifest": json.loads(files[contract.MANIFEST]), "files": listing, "note": ""}
            ).encode()
        elif tail.startswith("cache/delta?since="):
            body = self.server.delta_body
        else:
            body = files[tail.removeprefix("cache/")]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:40] + '"'


def _serve(snapshot: Path, delta_body: bytes) -> _Server:
    server = _Server(("127.0.0.1", 0), _Handler)
    manifest = {
        "format_version": contract.FORMAT_VERSION,
        "fleet": FLEET,
        "memory_mode": "live",
        "embedder": {"name": embed.NAME, "dims": embed.DIMS},
    }
    server.files = {
        contract.SNAPSHOT: snapshot.read_bytes(),
        contract.MANIFEST: json.dumps(manifest).encode(),
    }
    server.delta_body = delta_body
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _timed_pull(remote: sync.Remote, cache: Path) -> tuple[sync.PullReport, float]:
    started = time.perf_counter()
    report = sync.pull(remote, cache)
    return report, time.perf_counter() - started


def run(n: int, work: Path) -> dict[str, Any]:
    v1, v2 = work / f"v1-{n}.sqlite", work / f"v2-{n}.sqlite"
    claims = synthetic_claims(n, seed=5)
    timeline = [
        {
            "subject": c["subject"],
            "at": c["promoted_at"],
            "kind": "promoted",
            "claim_id": c["id"],
            "summary": c["text"],
        }
        for c in claims
    ]
    write_snapshot(v1, FLEET, claims, vectors="random", timeline=timeline)
    index1 = delta.seal(v1, version=1)
    changed = _change(v1, v2, n)
    started = time.perf_counter()
    index2 = delta.seal(v2, version=2)
    sealed = time.perf_counter() - started
    body = delta.encode(delta.diff(index1, index2, v2, base=1, version=2))
    packed = delta.pack_index(index2)
    diffed = time.perf_counter() - started - sealed
    host, fresh = work / f"host-{n}", work / f"fresh-{n}"
    (host / FLEET).mkdir(parents=True)
    shutil.copy(v1, host / FLEET / contract.SNAPSHOT)
    server = _serve(v2, body)
    remote = sync.Remote(f"http://127.0.0.1:{server.server_address[1]}", FLEET, "t")
    try:
        by_delta, delta_secs = _timed_pull(remote, host)
        full, full_secs = _timed_pull(remote, fresh)
    finally:
        server.shutdown()
    assert by_delta.delta and not full.delta, (by_delta, full)
    a, b = host / FLEET / contract.SNAPSHOT, fresh / FLEET / contract.SNAPSHOT
    snaps = [Snapshot(p, fleet=FLEET) for p in (a, b)]
    same = [s.search("cache retry timeout", k=10).results for s in snaps]
    assert same[0] == same[1] and snaps[0].meta == snaps[1].meta, "delta ≠ full download"
    for s in snaps:
        s.close()
    os.sync()
    return {
        "claims": n,
        "changed_rows": changed,
        "snapshot_bytes": v2.stat().st_size,
        "delta_bytes": by_delta.fetched_bytes,
        "full_bytes": full.fetched_bytes,
        "delta_secs": delta_secs,
        "full_secs": full_secs,
        "seal_secs": sealed,
        "diff_secs": diffed,
        "index_bytes": len(packed),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    a = p.parse_args()
    print(
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M}Z, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs"
    )
    print(
        "claims  changed  snapshot     full: bytes   secs   delta: bytes   secs   ratio  "
        "server: seal s  diff s  index"
    )
    with tempfile.TemporaryDirectory(prefix="delta-bench-") as tmp:
        for n in a.sizes:
            r = run(n, Path(tmp))
            print(
                f"{r['claims']:>6}  {r['changed_rows']:>7}  {r['snapshot_bytes'] / 1e6:6.1f} MB"
                f"  {r['full_bytes'] / 1e6:9.1f} MB  {r['full_secs']:5.2f}"
                f"  {r['delta_bytes'] / 1e6:9.2f} MB  {r['delta_secs']:5.2f}"
                f"  {r['full_bytes'] / max(1, r['delta_bytes']):5.0f}x"
                f"  {r['seal_secs']:14.2f}  {r['diff_secs']:6.2f}"
                f"  {r['index_bytes'] / 1e6:.1f} MB",
                flush=True,
            )


if __name__ == "__main__":
    main()
