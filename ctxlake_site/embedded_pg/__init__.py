"""A Django database backend: Postgres, started on first connection from the embedded default.

It is Django's own PostgreSQL backend with one change: before connecting, it attaches to
the embedded server (starting it if needed) and connects over its unix socket. So the
server starts on first *use* — `manage.py --help` or `check` never starts a database.
"""
