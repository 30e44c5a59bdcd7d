"""While the embedded database is stopped on purpose: one log line a minute, no tracebacks.

Workers retry every few seconds, django-q2 logs each failure with a traceback and restarts
its pusher every 10 s (logging that too), and gunicorn logs every failed request. An
operator who ran `manage.py embedded_db stop` wants one line a minute saying the database
is stopped and how to start it. The filter below (installed on the console handler by
settings.LOGGING) does that: while the stop marker exists, every warning or error that is
about the database (a database error in its exception chain, or from django-q2, whose
every complaint then is) is folded into that line; the first of each minute — across all
the processes of this host, through a small timestamp file beside the marker — is
printed, without its traceback, and the rest are dropped. Everything else is untouched.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path

INTERVAL_SECS = 60.0
DATABASE_LOGGERS = ("django-q", "django.db", "ctxlake")


def _stop_in_force() -> str | None:
    """The stop marker's text when the embedded database is in use and stopped on purpose."""
    from django.conf import settings

    from ctxlake_site import embedded_db

    if settings.DATABASES["default"]["ENGINE"] != "ctxlake_site.embedded_pg":
        return None
    return embedded_db.stopped_on_purpose()


def _about_the_database(record: logging.LogRecord) -> bool:
    if record.name.startswith(DATABASE_LOGGERS):
        return True
    from django.db import Error as DjangoDatabaseError
    from psycopg import Error as DriverError

    exc = record.exc_info[1] if record.exc_info else None
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, DjangoDatabaseError | DriverError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def first_this_minute(stamp: Path) -> bool:
    """True for the first caller in each INTERVAL_SECS, whichever process on this host."""
    try:
        fd = os.open(stamp, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return True  # cannot coordinate: say it rather than hide it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        st = os.fstat(fd)
        if st.st_size and time.time() - st.st_mtime < INTERVAL_SECS:
            return False
        if not st.st_size:
            os.write(fd, b"1")
        os.utime(fd)
        return True
    finally:
        os.close(fd)


class StoppedDatabaseFilter(logging.Filter):
    """Fold a stopped database's log noise into one line a minute."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        why = _stop_in_force()
        if why is None or not _about_the_database(record):
            return True
        from ctxlake_site import embedded_db

        if not first_this_minute(embedded_db.log_stamp()):
            return False
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.msg, record.args = f"ctxlake: {embedded_db.stopped_message(why)}", ()
        record.exc_info = record.exc_text = record.stack_info = None
        return True
