"""gunicorn settings `./ctxlake up` runs with (`-c python:ctxlake_site.gunicorn_conf`).

Stdlib only: the `ctxlake` launcher and settings.py both read it, so the thread count and
the long-poll cap derived from it (settings.CTXLAKE_LONGPOLL_WAITERS) have one definition.

Why gthread: a long-poll on GET …/changes waits up to 30 s for a render. gunicorn's default
`sync` worker serves one request at a time, so one waiting host would stall every other
request to that process, and a wait near `--timeout` gets the worker killed. `gthread`
serves each request on a thread of a pool; the master's heartbeat does not depend on a
request finishing. Waiting threads hold no database connection (fleet.change_feed).
"""

worker_class = "gthread"
#: Request threads per worker process: at most half may sit in a long-poll (settings.py).
threads = 16
