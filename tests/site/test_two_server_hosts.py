"""The server tier on two web hosts and two worker hosts sharing only Postgres and Redis.

Each "host" is its own process with its own CTXLAKE_HOME (so its own spool and cache
directories): two gunicorn web servers and two `manage.py qcluster` workers on one Redis
broker, all on this test run's database. Writes uploaded through either web host are
applied exactly once; both web hosts serve the latest render with the same ETags; a
worker SIGKILLed mid-drain or mid-render loses and doubles nothing, and the other one
finishes the job.

Worker processes are started in their own process groups and killed, stopped and resumed
as groups (a qcluster is a parent with a guard and worker children). The hosts share one
Redis queue, so a host is paused only once Redis no longer counts it among the clients
waiting for a task (`_pause`): a host stopped inside its blocking pop would still be handed
the next task, and hold it until it is resumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import connection
from django.utils import timezone

from claims.models import Claim
from fleet import artifacts, inbox, locks, tokens
from fleet.models import Activity, Agent, AppliedEvent, Fleet, InboxEvent, Lease
from mcp_bridge import contract
from mcp_bridge.contract.spool import utc_now
from tests.helpers import database_url_for_test_database, env_for_test_database
from tests.site.test_redis_cluster import _free_port, redis_url  # noqa: F401 - a fixture
from tests.site.test_render import _promoted

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
AGENTS = 50  # the writes are spread over them, well under the per-agent lease cap
WAIT_SECS = 120


@dataclass
class Host:
    """One server-tier process (a web server or a worker cluster) and its own home."""

    name: str
    home: Path
    env: dict[str, str]
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    def start(self) -> Host:
        log = open(self.home / "process.log", "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(self.args, cwd=ROOT, env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return self

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)  # the group this test started for it

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.signal(signal.SIGKILL)  # children a stopped parent left behind, if any

    def log_tail(self) -> str:
        return (self.home / "process.log").read_bytes()[-3000:].decode(errors="replace")


@dataclass
class Tier:
    webs: list[Host]
    workers: list[Host]
    base_env: dict[str, str]
    tmp: Path
    extra: list[Host] = field(default_factory=list)

    def worker(self, name: str) -> Host:
        home = self.tmp / name
        home.mkdir(exist_ok=True)
        env = {**self.base_env, "CTXLAKE_HOME": str(home),  # its broker connections named
               "CTXLAKE_REDIS_URL": f"{self.base_env['CTXLAKE_REDIS_URL']}?client_name={name}"}
        return Host(name, home, env, [sys.executable, "manage.py", "qcluster"]).start()

    def enqueue(self, host: Host, call: str) -> None:
        """Put a task on the shared Redis queue, as any process of that host would."""
        code = f"from django_q.tasks import async_task; async_task({call})"
        done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT,
                              env=host.env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()[-2000:]

    def logs(self) -> str:
        from django_q.models import Task

        tasks = [f"{t.func} {t.args} ok={t.success}: {str(t.result)[-300:]}"
                 for t in Task.objects.order_by("-started")[:20]]
        from fleet.models import CacheHead
        tasks += [str(row) for row in CacheHead.objects.values_list("fleet__slug", "name",
                                                                    "rendered_at")]
        tasks.append(f"applied {AppliedEvent.objects.count()}, inbox "
                     f"{InboxEvent.objects.count()}, leases {Lease.objects.count()}")
        return "\n".join([*(f"--- {h.name}\n{h.log_tail()}"
                             for h in [*self.webs, *self.workers, *self.extra]),
                           "--- tasks", *tasks])


@pytest.fixture
def tier(redis_url: str, tmp_path: Path) -> Iterator[Tier]:  # noqa: F811 - the fixture
    base = env_for_test_database(CTXLAKE_REDIS_URL=redis_url, CTXLAKE_Q_WORKERS="2",
                                 CTXLAKE_LOG_LEVEL="INFO",
                                 SECRET_KEY="two-server-hosts-" + "x" * 40)
    for key in ("CTXLAKE_CACHE_DIR", "CTXLAKE_SPOOL_DIR", "CTXLAKE_DB_NAME"):
        base.pop(key, None)  # each host's own, under its own CTXLAKE_HOME
    base["DATABASE_URL"] = database_url_for_test_database()  # not $CTXLAKE_HOME/pg
    made = Tier([], [], base, tmp_path)
    try:
        for n in (1, 2):
            home = tmp_path / f"web{n}"
            home.mkdir()
            port = _free_port()
            web = Host(f"web{n}", home, {**base, "CTXLAKE_HOME": str(home)}, [
                sys.executable, "-m", "gunicorn", "ctxlake_site.wsgi", "--bind",
                f"127.0.0.1:{port}", "--workers", "1", "--threads", "4"],
                url=f"http://127.0.0.1:{port}")
            made.webs.append(web.start())
        made.workers = [made.worker("worker1"), made.worker("worker2")]
        for web in made.webs:
            _wait(partial(_up, web.url), "web host up", made)
        yield made
    finally:
        for host in [*made.webs, *made.workers, *made.extra]:
            host.stop()


def _up(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/api/v1/health", timeout=2).close()
    except urllib.error.HTTPError:
        return True  # it answers
    except OSError:
        return False
    return True


def _wait(ok: Callable[[], bool], what: str, tier: Tier, secs: float = WAIT_SECS,
          poll: float = 0.05) -> None:
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(poll)
    pytest.fail(f"timed out waiting for: {what}\n{tier.logs()}")


def _request(url: str, token: str, *, body: bytes | None = None,
             etag: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/x-ndjson"
    if etag:
        headers["If-None-Match"] = etag
    req = urllib.request.Request(url, data=body, headers=headers,
                                 method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _claims(fleet: Fleet, start: int, n: int) -> list[dict[str, Any]]:
    at = utc_now().strftime("%Y-%m-%dT%H:%M:%SZ")  # live leases: the roster shows them
    return [{"v": 1, "id": str(uuid.uuid4()), "kind": "lease.claim", "fleet": fleet.slug,
             "agent": f"a{i % AGENTS:02d}", "session": None, "at": at,
             "payload": {"paths": [f"src/{i}.py"], "reason": "r", "ttl_secs": 3600}}
            for i in range(start, start + n)]


def _upload(web: Host, fleet: Fleet, token: str, events: list[dict[str, Any]]) -> None:
    body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    status, _, answer = _request(f"{web.url}/api/v1/fleets/{fleet.slug}/spool", token,
                                 body=body)
    assert status == 200, answer[:500]
    assert json.loads(answer) == {"accepted": [e["id"] for e in events], "rejected": []}


def _served(web: Host, fleet: Fleet, token: str, name: str) -> tuple[str, bytes]:
    status, headers, body = _request(f"{web.url}/api/v1/fleets/{fleet.slug}/cache/{name}",
                                     token)
    assert status == 200, (web.name, name, status, body[:300])
    return headers["ETag"], body


def _heads(fleet: Fleet, names: tuple[str, ...]) -> dict[str, str | None]:
    return {name: artifacts.etag(fleet, name) for name in names}


def _both_serve_the_latest(tier: Tier, fleet: Fleet, token: str,
                           names: tuple[str, ...]) -> dict[str, tuple[str, bytes]]:
    """(ETag, body) per name, served alike by both web hosts and equal to the database's
    latest render, each host answering 304 to the other's ETag.

    The comparison counts only when the latest render stayed the same while it ran: the
    queue may run another render at any moment (a debounced follow-up, the periodic
    render_all), and a render in the middle would make the hosts differ rightly.
    """
    web1, web2 = tier.webs
    for _ in range(50):
        before = _heads(fleet, names)
        files = {name: _served(web1, fleet, token, name) for name in names}
        other = {name: _served(web2, fleet, token, name) for name in names}
        not_modified = [
            _request(f"{web.url}/api/v1/fleets/{fleet.slug}/cache/{name}", token,
                     etag=files[name][0])[0]
            for web in tier.webs for name in names
        ]
        if _heads(fleet, names) != before:
            continue  # a render landed in the middle: compare again
        for name in names:
            assert files[name] == other[name], name
            assert files[name][0] == before[name], name
        assert set(not_modified) == {304}, not_modified
        return files
    pytest.fail("a render landed during each of 50 comparisons")


def _leases_served(web: Host, fleet: Fleet, token: str) -> int:
    status, _, body = _request(f"{web.url}/api/v1/fleets/{fleet.slug}/cache/roster.json",
                               token)
    if status != 200:
        return -1
    return sum(len(a["leases"]) for a in json.loads(body)["agents"])


def _lock_held(classid: int, objid: int, objsubid: int) -> bool:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND classid = %s AND objid = %s AND objsubid = %s",
                    [classid, objid, objsubid])
        return bool(cur.fetchone()[0])


def _inbox_held(fleet: Fleet) -> bool:
    """A drain is mid-batch on the fleet's inbox (it holds inbox.lock_fleet's lock)."""
    return _lock_held(inbox._DRAIN_LOCK_CLASS, fleet.pk, 2)


def _render_held(fleet: Fleet) -> bool:
    """A render of the fleet is under way (it holds workers.render_fleet's lock)."""
    key = locks.advisory_key(locks.render_lock(fleet.pk)) & 0xFFFFFFFFFFFFFFFF
    return _lock_held(key >> 32, key & 0xFFFFFFFF, 1)


def _waiting_for_tasks(worker: Host, tier: Tier) -> bool:
    """Redis has one of the host's connections blocked in its pop of the task queue."""
    client = redis.Redis.from_url(tier.base_env["CTXLAKE_REDIS_URL"])
    try:
        return any(c["name"] == worker.name and "b" in c["flags"] for c in client.client_list())
    finally:
        client.close()


def _pause(worker: Host, tier: Tier) -> None:
    """SIGSTOP a worker host, then wait until Redis stops handing it tasks.

    The host's pusher waits for tasks in a blocking pop with a timeout (django-q2: 1 s);
    stopped inside it, it would still be given the next task Redis receives. Once the
    server has timed that pop out, every task goes to the hosts still running.
    """
    worker.signal(signal.SIGSTOP)
    _wait(lambda: not _waiting_for_tasks(worker, tier), f"{worker.name} out of the queue", tier)


def _stop_idle(worker: Host, fleet: Fleet, tier: Tier) -> None:
    """Pause a worker host that is not rendering `fleet` (so it holds no render lock)."""
    for _ in range(100):
        _wait(lambda: not _render_held(fleet), "no render under way", tier)
        _pause(worker, tier)
        if not _render_held(fleet):
            return
        worker.signal(signal.SIGCONT)  # it had just begun one: let it finish, try again
    pytest.fail("could not find the worker between renders")


def _applied(fleet: Fleet) -> int:
    return AppliedEvent.objects.filter(fleet=fleet).count()


def test_two_web_and_two_worker_hosts_apply_once_serve_the_latest_and_survive_kills(
    tier: Tier, tmp_path: Path
) -> None:
    fleet = Fleet.objects.create(slug="tier", name="tier", memory_mode="live")
    Agent.objects.bulk_create([Agent(fleet=fleet, agent_id=f"a{i:02d}") for i in range(AGENTS)])
    token = tokens.issue_token(fleet, role="operator", name="relay").secret
    web1, web2 = tier.webs
    worker1, worker2 = tier.workers

    # 1. Writes through either web host, some sent to both: each applied exactly once.
    sent = _claims(fleet, 0, 300)
    batches = [sent[i:i + 50] for i in range(0, len(sent), 50)]
    for n, batch in enumerate(batches):
        _upload(tier.webs[n % 2], fleet, token, batch)
    for n, batch in enumerate(batches[:3]):  # a retry through the other host
        _upload(tier.webs[(n + 1) % 2], fleet, token, batch)
    _wait(lambda: _applied(fleet) == 300 and not InboxEvent.objects.exists(),
          "300 events applied", tier)
    assert Lease.objects.filter(fleet=fleet).count() == 300
    assert Activity.objects.filter(fleet=fleet, verb="spool.received").count() == 300
    assert set(AppliedEvent.objects.filter(fleet=fleet).values_list("source", flat=True)) == {
        "api"}
    for web in tier.webs:  # nothing was kept on a web host's disk
        assert not (web.home / "spool" / contract.SPOOL_SUBDIR).exists()

    # 2. Both web hosts serve the latest render, byte for byte, with the same ETags.
    _wait(lambda: all(_leases_served(w, fleet, token) == 300 for w in tier.webs),
          "both web hosts serve a roster with the 300 leases", tier)
    _both_serve_the_latest(
        tier, fleet, token,
        (contract.MANIFEST, contract.ROSTER, contract.SNAPSHOT, contract.BRIEFING))

    # 3. SIGKILL a worker host mid-drain: the other applies the rest, each once.
    _wait(lambda: all(_waiting_for_tasks(w, tier) for w in tier.workers),
          "both worker hosts waiting on the queue", tier)
    _pause(worker2, tier)  # so the drain under way is worker1's (the inbox is empty:
    assert not InboxEvent.objects.exists()  # worker2 holds no inbox rows)
    tier.enqueue(worker1, "'ctxlake_site.workers.drain_spool_follow'")  # a no-op if following
    more = _claims(fleet, 300, 2000)
    _upload(web1, fleet, token, more[:1000])
    _upload(web2, fleet, token, more[1000:])
    _wait(lambda: _inbox_held(fleet), "worker1 mid-drain", tier, poll=0.005)
    worker1.signal(signal.SIGKILL)
    killed_at = _applied(fleet)
    _wait(lambda: not _inbox_held(fleet), "the killed worker's claim released", tier)
    assert _applied(fleet) < 2300, "the kill came after the drain, not during it"
    worker2.signal(signal.SIGCONT)
    tier.enqueue(worker2, "'ctxlake_site.workers.drain_spool_follow'")  # the schedule's tick
    _wait(lambda: _applied(fleet) == 2300 and not InboxEvent.objects.exists(),
          "the other worker applied the rest", tier)
    assert Lease.objects.filter(fleet=fleet).count() == 2300
    assert killed_at >= 300

    # 4. SIGKILL a worker host mid-render: nothing half-published, the other renders.
    _promoted(fleet, 3000)  # a render that takes a while
    # A render request the killed worker had taken is gone with it (Redis does not redeliver);
    # the every-5-minutes render_all would come; ask now instead.
    tier.enqueue(worker2, f"'ctxlake_site.workers.render_fleet_cache', {fleet.pk}")
    _wait(lambda: all(_leases_served(w, fleet, token) == 2300 for w in tier.webs)
          and not _render_held(fleet), "the render after the drain", tier)
    # Renders are proportional to the change (claims.snapshot_update): with nothing changed
    # the next one is over at once. 3,000 more claims give the restarted host's render
    # real work to be killed in the middle of.
    Claim.objects.bulk_create(
        Claim(fleet=fleet, number=3001 + i, text=f"claim {3000 + i} about gadgets",
              type="fact", subject="gadgets", scope="fleet", status="promoted",
              promoted_at=timezone.now(), independent_sessions=1, text_hash="0" * 64)
        for i in range(3000))
    _stop_idle(worker2, fleet, tier)  # no host renders now: the latest render stays put
    before = _served(web1, fleet, token, contract.MANIFEST)[0]
    restarted = tier.worker("worker1")  # the killed host, back
    tier.extra.append(restarted)
    tier.enqueue(restarted, f"'ctxlake_site.workers.render_fleet_cache', {fleet.pk}")
    _wait(lambda: _render_held(fleet), "the restarted worker mid-render", tier, poll=0.005)
    restarted.signal(signal.SIGKILL)
    _wait(lambda: not _render_held(fleet), "the killed render's lock released", tier)
    for web in tier.webs:  # still the whole previous render, on both hosts
        assert _served(web, fleet, token, contract.MANIFEST)[0] == before
    worker2.signal(signal.SIGCONT)
    tier.enqueue(worker2, f"'ctxlake_site.workers.render_fleet_cache', {fleet.pk}")
    _wait(lambda: all(_served(w, fleet, token, contract.MANIFEST)[0] != before
                      for w in tier.webs), "the other worker's render", tier)
    files = _both_serve_the_latest(
        tier, fleet, token, (contract.MANIFEST, contract.ROSTER, contract.SNAPSHOT))
    snapshot = tmp_path / "served.sqlite"
    snapshot.write_bytes(files[contract.SNAPSHOT][1])
    db = sqlite3.connect(snapshot)
    try:
        assert db.execute("select count(*) from claims").fetchone()[0] == 6000
    finally:
        db.close()
    manifest = json.loads(files[contract.MANIFEST][1])
    roster = json.loads(files[contract.ROSTER][1])
    assert manifest["generated_at"] == roster["generated_at"]  # one render, not a mix
    local = worker2.home / "cache" / fleet.slug / contract.MANIFEST  # its local copy too
    assert json.loads(local.read_bytes())["generated_at"] == manifest["generated_at"]
