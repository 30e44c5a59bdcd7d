"""The real server tier for the benches that measure over HTTP, in one place.

api_bench.py, push_bench.py and fleet_scale.py each start the production web server
(gunicorn, `ctxlake_site/gunicorn_conf.py` as `./ctxlake up` runs it) and some the workers
(`manage.py qcluster`), seed claims with vectors, and print the load average beside their
figures; fleet_scale.py also reads the CPU each server process tree spent. One copy of each,
so the benches measure the same server the same way.

Import it after `django.setup()` (it imports the models for the seeding).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from django.db import connection
from django.utils import timezone

from claims import embeddings
from claims.models import Claim, text_hash
from fleet.models import Fleet

ROOT = Path(__file__).resolve().parent.parent
#: The web server's request rate limit during a bench: the load generator is not an abuser.
UNLIMITED_RATE = "100000000"
TICKS = os.sysconf("SC_CLK_TCK")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_gunicorn(port: int, workers: int, *, worker_class: str = "gthread",
                   env: dict[str, str] | None = None,
                   root: Path = ROOT) -> subprocess.Popen[bytes]:
    """gunicorn on 127.0.0.1:`port`, in a process group of its own; returns once it listens.

    gthread: with the production config (threads, long-poll cap); "sync": gunicorn's default
    worker, for push_bench's comparison. `root`: the checkout whose code it serves (another
    commit's worktree, for rest_cpu_ab's baseline)."""
    env = {**os.environ, "CTXLAKE_API_RATE_PER_MINUTE": UNLIMITED_RATE, **(env or {})}
    config = ["--config", "python:ctxlake_site.gunicorn_conf"] if worker_class == "gthread" else []
    cmd = [sys.executable, "-m", "gunicorn", "ctxlake_site.wsgi", *config, "--workers",
           str(workers), "--bind", f"127.0.0.1:{port}", "--log-level", "warning"]
    server = subprocess.Popen(cmd, cwd=root, env=env, start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server
        except OSError:
            time.sleep(0.1)
    stop(server)
    raise SystemExit("gunicorn did not start")


def start_qcluster(workers: int, env: dict[str, str] | None = None,
                   root: Path = ROOT) -> subprocess.Popen[bytes]:
    """`manage.py qcluster` with `workers` workers, in a process group of its own; `root`:
    the checkout whose code it runs (another commit's worktree, for write_cpu_ab)."""
    env = {**os.environ, "CTXLAKE_Q_WORKERS": str(workers), **(env or {})}
    return subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM the process group this module started, then SIGKILL what is left of it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # a child the parent left behind, if any
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


@contextlib.contextmanager
def baseline_checkout(ref: str, parent: Path) -> Iterator[Path]:
    """`ref` checked out as a throwaway git worktree under `parent`: the other side of the
    same-run A/B benches (rest_cpu_ab, write_cpu_ab), removed afterwards whatever happened."""
    worktree = parent / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(worktree), ref], cwd=ROOT,
                   check=True)
    try:
        yield worktree
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT)


# -- CPU of a process tree -------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and of its children it has reaped)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) / TICKS


def tree_cpu(root: int) -> float:
    """CPU seconds a process tree has used: every live member's own time plus the time of
    the children each has reaped (a Postgres backend that exited, a recycled worker), read
    from /proc/<pid>/stat. A bench takes it before and after and subtracts."""
    stats = {pid: s for pid in _pids() if (s := _stat(pid)) is not None}
    members, total = {root}, 0.0
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _) in stats.items():
            if ppid in members and pid not in members:
                members.add(pid)
                grew = True
    for pid in members:
        if pid in stats:
            total += stats[pid][1]
    return total


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat: two readings give the
    machine's busy share between them, whoever used it (other sessions on it too)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return float(sum(values) - idle), float(sum(values))


def postgres_pid() -> int | None:
    """The postmaster serving this process's database, if it runs on this machine."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        backend = int(cur.fetchone()[0])
    stat = _stat(backend)
    return stat[0] if stat is not None else None


# -- seeding ---------------------------------------------------------------------------------


def vocabulary() -> list[str]:
    words = (ROOT / "mcp_bridge" / "contract" / "data" / "vocab.txt").read_text().split()
    return [w for w in words if w.isalpha() and w.isascii() and 4 <= len(w) <= 10][:8000]


def make_claims(fleet: Fleet, start: int, count: int, words: list[str], rng: random.Random) -> None:
    """Bulk-insert promoted claims with Zipf-ish word use and random unit vectors under the
    current embedder's name (numbers and hashes set by hand)."""
    weights = [1 / (rank + 10) for rank in range(len(words))]
    now = timezone.now()
    types = Claim.Type.values
    model = embeddings.embedder()
    for batch in range(start, start + count, 5000):
        vectors = np.random.default_rng(batch).normal(size=(5000, model.DIMS)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        rows = []
        for n in range(batch, min(batch + 5000, start + count)):
            text = " ".join(rng.choices(words, weights, k=12)) + f" (#{n})"
            rows.append(
                Claim(
                    fleet=fleet,
                    number=n + 1,
                    text=text,
                    text_hash=text_hash(text),
                    type=types[n % len(types)],
                    subject=f"subject-{n % 200}",
                    scope=Claim.Scope.FLEET,
                    status=Claim.Status.PROMOTED,
                    promoted_at=now,
                    independent_sessions=1 + n % 3,
                    embedding=vectors[n - batch],
                    embedding_model=model.NAME,
                )
            )
        Claim.objects.bulk_create(rows)
    Fleet.objects.filter(pk=fleet.pk).update(claim_seq=start + count)
