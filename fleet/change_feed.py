"""Push: tell waiting agent hosts, within about a second, that a fleet's render changed.

A render publishes a *version* (its generated_at stamp) with `announce()`. Two things ride
the render's own transaction, so both become visible at COMMIT and never one without the
other: the version in the shared database cache (what a request arriving later compares
with) and a Postgres NOTIFY (what wakes requests already waiting; Postgres delivers it only
at COMMIT, and to every web process on every host listening on the same database).

Waiting costs no database connection and no query: one listener thread per web process
holds one connection in LISTEN and fans each notification out through a Condition. A
waiter is a request thread parked on that Condition, bounded per process and per token
(`Busy` beyond that). If the listener is down, waiters simply time out and the host pulls
on its interval as before: push is an accelerator, never the only way a change arrives.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.db import connection

from fleet import pg_listen

log = logging.getLogger(__name__)

CHANNEL = "ctxlake_changes"
#: The version of a fleet that has announced no render yet (or whose entry was culled).
NO_VERSION = "none"
#: The longest a long-poll waits; a host pulls at least this often anyway.
MAX_WAIT_SECS = 30
#: How long a first waiter gives the listener to start listening before it waits anyway.
LISTEN_READY_SECS = 2.0
RECONNECT_SECS = (1.0, 30.0)  # the listener's backoff after losing its connection
STOP_LOOK_SECS = 1.0  # how soon the listener sees stop() while no notice comes


class Busy(Exception):
    """Too many long-polls already wait (this token's, or this process's): try later."""

    def __init__(self, why: str, retry_after: int) -> None:
        super().__init__(why)
        self.retry_after = retry_after


def version_key(fleet_slug: str) -> str:
    return f"ctxlake:render-version:{fleet_slug}"


def announce(fleet_slug: str, version: str) -> None:
    """Record `version` as the fleet's latest render and wake its waiters, at COMMIT.

    Call it inside the transaction that publishes the render; outside one, it takes effect
    at once (the cache row first, so a woken host asking again never reads the old version).
    Each render needs its own version, as a waiter ignores a notice of the version it has:
    the render's microsecond stamp is one, since one fleet's renders run one at a time.
    """
    cache.set(version_key(fleet_slug), version, timeout=None)
    with connection.cursor() as cur:
        cur.execute("SELECT pg_notify(%s, %s)", [CHANNEL, f"{fleet_slug} {version}"])


def current_version(fleet_slug: str) -> str:
    """The latest announced render version (one cache read), or NO_VERSION."""
    value = cache.get(version_key(fleet_slug))
    return value if isinstance(value, str) else NO_VERSION


@dataclass
class Ticket:
    """One waiter's place: its fleet, its token and the fleet's notice count when it came."""

    fleet: str
    holder: str
    seen: int


class Feed:
    """This process's listener thread, its latest versions and its waiters."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._latest: dict[str, str] = {}
        self._notices: Counter[str] = Counter()  # per fleet, bumped by every notification
        self._by_holder: Counter[str] = Counter()
        self._by_fleet: Counter[str] = Counter()  # waiters per fleet, for _catch_up
        self._waiting = 0
        self._listening = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- waiters --------------------------------------------------------------------------

    def enter(self, fleet: str, holder: str) -> Ticket:
        """Take a waiter's place, or raise Busy; the caller must `leave()` it.

        Taken *before* the caller reads the current version: a render committed after that
        read bumps the notice count past `seen`, so no change falls between read and wait.
        """
        self._ensure_listener()
        with self._cond:
            if self._by_holder[holder] >= settings.CTXLAKE_LONGPOLL_PER_TOKEN:
                raise Busy(
                    f"this token already has {self._by_holder[holder]} long-poll(s) waiting "
                    f"here (at most {settings.CTXLAKE_LONGPOLL_PER_TOKEN}); one per host is "
                    "enough",
                    retry_after=MAX_WAIT_SECS,
                )
            if self._waiting >= settings.CTXLAKE_LONGPOLL_WAITERS:
                raise Busy(
                    f"this server process already holds {self._waiting} long-polls (at most "
                    f"{settings.CTXLAKE_LONGPOLL_WAITERS}); poll instead for now",
                    retry_after=MAX_WAIT_SECS // 2,
                )
            self._by_holder[holder] += 1
            self._by_fleet[fleet] += 1
            self._waiting += 1
            return Ticket(fleet, holder, self._notices[fleet])

    def leave(self, ticket: Ticket) -> None:
        with self._cond:
            self._by_holder[ticket.holder] -= 1
            if self._by_holder[ticket.holder] <= 0:
                del self._by_holder[ticket.holder]  # no entry left behind per token
            self._by_fleet[ticket.fleet] -= 1
            if self._by_fleet[ticket.fleet] <= 0:
                del self._by_fleet[ticket.fleet]
            self._waiting -= 1

    def wait(self, ticket: Ticket, after: str, timeout: float) -> str | None:
        """The fleet's new version once one other than `after` is announced; None at timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                if self._notices[ticket.fleet] != ticket.seen:
                    latest = self._latest.get(ticket.fleet)
                    if latest is not None and latest != after:
                        return latest
                    ticket.seen = self._notices[ticket.fleet]  # a late echo of `after`
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def counts(self) -> tuple[int, int]:
        """(waiters in this process, tokens with a waiter): for tests and health."""
        with self._cond:
            return self._waiting, len(self._by_holder)

    # -- the listener ---------------------------------------------------------------------

    def _ensure_listener(self) -> None:
        """Start the listener with the first waiter; only that one waits for it to listen."""
        with self._cond:
            started = self._thread is None or not self._thread.is_alive()
            if started:
                self._thread = threading.Thread(
                    target=self._listen_forever, name="ctxlake-change-feed", daemon=True
                )
                self._thread.start()
        if started:
            self._listening.wait(LISTEN_READY_SECS)

    def listening(self) -> bool:
        return self._listening.is_set()

    def _listen_forever(self) -> None:
        """1. connect (its own connection, autocommit) 2. LISTEN 3. catch up 4. fan out.

        Notices sent while disconnected are lost, so after LISTEN the thread reads the
        versions of the fleets that have waiters (one query) and delivers them as notices:
        a render committed during an outage still wakes its waiters, one a moment later.
        """
        backoff = RECONNECT_SECS[0]
        while True:
            try:
                with pg_listen.listen_connection("ctxlake-change-feed", CHANNEL) as conn:
                    self._listening.set()
                    backoff = RECONNECT_SECS[0]
                    self._catch_up()
                    while not self._stopping.is_set():
                        for notice in pg_listen.notices(conn, timeout=STOP_LOOK_SECS):
                            self._deliver(notice.payload)
                    return
            except Exception as exc:  # noqa: BLE001 - any failure: log, back off, reconnect
                log.warning("change feed: listener lost (%s); reconnecting in %.0fs", exc, backoff)
            finally:
                self._listening.clear()
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, RECONNECT_SECS[1])

    def stop(self) -> None:
        """End the listener and close its connection (tests: before the test DB is dropped)."""
        with self._cond:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping.set()
        thread.join()
        self._stopping.clear()

    def _catch_up(self) -> None:
        with self._cond:
            fleets = list(self._by_fleet)
        if not fleets:
            return
        try:
            found = cache.get_many([version_key(f) for f in fleets])
        finally:
            connection.close()  # this thread's Django connection: not kept between outages
        for fleet in fleets:
            version = found.get(version_key(fleet))
            if isinstance(version, str):
                self._deliver(f"{fleet} {version}")

    def _deliver(self, payload: str) -> None:
        fleet, _, version = payload.partition(" ")
        if not fleet or not version:
            return
        with self._cond:
            self._latest[fleet] = version
            self._notices[fleet] += 1
            self._cond.notify_all()


#: The one feed of this process (gunicorn forks first, so each worker starts its own thread).
FEED = Feed()
