"""gunicorn settings `./ctxlake up` runs with (`-c python:ctxlake_site.gunicorn_conf`).

Stdlib only: the `ctxlake` launcher and settings.py both read it, so the thread counts, the
long-poll cap and the database pool derived from them (settings.CTXLAKE_LONGPOLL_WAITERS,
settings.CTXLAKE_DB_POOL) have one definition.

Why gthread: a long-poll on GET …/changes waits up to 30 s for a render. gunicorn's default
`sync` worker serves one request at a time, so one waiting host would stall every other
request to that process, and a wait near `--timeout` gets the worker killed. `gthread`
serves each request on a thread of a pool; the master's heartbeat does not depend on a
request finishing.

Why two kinds of thread: every agent host keeps one long-poll parked, so a process needs a
thread per host it pushes to, beside the threads that serve REST. A parked thread holds no
database connection (fleet.change_feed) and costs no CPU; a serving thread borrows one from
the process's pool (psycopg_pool, through Django's `pool` option), sized to `rest_threads`,
so Postgres sees at most that many connections per process however many threads wait.

Each worker freezes its start-up objects once it has loaded the app (`post_worker_init`,
ctxlake_site.startup_gc says why).
"""

import os

worker_class = "gthread"
#: Requests one worker process serves at once with the database: its connection pool's size.
rest_threads = 16
#: Long-polls one worker process may hold parked (settings.CTXLAKE_LONGPOLL_WAITERS).
longpoll_threads = 48
threads = rest_threads + longpoll_threads
#: Set in the worker processes only (the arbiter applies it), so `manage.py` and the
#: workers' forked processes keep plain connections: a pool does not survive a fork.
raw_env = [f"CTXLAKE_DB_POOL={os.environ.get('CTXLAKE_DB_POOL', rest_threads)}"]


def post_worker_init(worker: object) -> None:
    """gunicorn's hook, in the worker once it has loaded the app."""
    from ctxlake_site.startup_gc import freeze_startup_objects

    freeze_startup_objects()
