"""What the test database is doing when a test has waited too long on it.

`test_a_render_killed_mid_write_leaves_the_previous_cache_whole` sometimes stalls for
minutes in CI (docs/tests.md has the runs). faulthandler_timeout showed the test waiting in
psycopg on one SELECT of the render (contradictions.open_pairs): a lock, or a plan gone
bad, the Python stack cannot say which. After `after` seconds this prints, from
its own connection, every session of the test database with what it waits for, who blocks
it and its query, to stderr with pytest's capture suspended (as faulthandler's dump, it
reaches the run's log from an xdist worker). It only reports: the test goes on and passes
or fails on its own.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection

SESSIONS = """
SELECT pid, state, wait_event_type, wait_event, pg_blocking_pids(pid),
       round(extract(epoch FROM now() - query_start)::numeric, 1), left(query, 300)
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
ORDER BY query_start
"""


def report(label: str, config: Any) -> None:
    """Print the test database's sessions (this thread's own connection, closed after);
    `config`: pytest's, whose capture is suspended while printing."""
    try:
        with connection.cursor() as cur:
            cur.execute(SESSIONS)
            rows = cur.fetchall()
        lines = [f"pg_watchdog: {label}: {len(rows)} other session(s) of the test database"]
        lines += [f"  pid {r[0]} {r[1]} wait {r[2]}/{r[3]} blocked by {r[4]} for {r[5]} s: "
                  f"{r[6]!r}" for r in rows]
    except Exception as e:  # a report that fails says so and changes nothing
        lines = [f"pg_watchdog: {label}: could not read pg_stat_activity ({e!r})"]
    finally:
        connection.close()
    with config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        sys.stderr.write("\n".join(lines) + "\n")
        sys.stderr.flush()


@contextmanager
def watchdog(label: str, config: Any, after: float = 120.0) -> Iterator[None]:
    """Report the database's sessions if the block is still running after `after` s."""
    timer = threading.Timer(after, report, args=(label, config))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
