"""No secret in a log line: query values elided, every message and traceback scrubbed.

A query string is where an agent's search text lands (`/claims/search?q=…`), and search
text is free text: a pasted token of a shape no rule knows would pass any pattern, so the
values are not logged at all — only their names, plus values that are plain numbers or
booleans (`limit=10`, `stale=true`). Everything else a log line carries goes through the
one redactor (mcp_bridge.contract.redact), tracebacks included.

ScrubFilter sits on the console handler in settings.LOGGING (handler filters see records
propagated from every logger, logger filters would not); the gunicorn logger class in
ctxlake_site/gunicorn_logger.py uses the same functions for the access and error logs.
"""

from __future__ import annotations

import logging
import re
import traceback

from mcp_bridge.contract import redact

ELIDED = "…"
_PLAIN_VALUE = re.compile(r"^(?:-?\d{1,12}|true|false|True|False)$")
# "?name=value&…" inside any text (a request line, a referer, an exception message).
_QUERY = re.compile(r"\?([^\s\"'<>#?]*=[^\s\"'<>#]*)")


def elide_query(query: str) -> str:
    """`q=ghp_x&limit=10` → `q=…&limit=10`: names stay, values only when plainly safe."""
    if not query:
        return query
    parts = []
    for item in query.split("&"):
        name, sep, value = item.partition("=")
        name = redact.scrub_text(name)[:64]
        parts.append(f"{name}{sep}{value if _PLAIN_VALUE.match(value) else ELIDED}" if sep
                     else name)
    return "&".join(parts)


def loggable_url(uri: str) -> str:
    """A path or URL with its query values elided and the rest scrubbed."""
    path, sep, query = uri.partition("?")
    return redact.scrub_text(path) + (sep + elide_query(query) if sep else "")


def scrub_log_text(text: str) -> str:
    """Any log text: queries inside it elided, then the redactor over all of it."""
    return redact.scrub_text(_QUERY.sub(lambda m: "?" + elide_query(m.group(1)), text))


class ScrubFilter(logging.Filter):
    """Rewrite a record in place so every handler after this one sees it scrubbed:
    the formatted message, the traceback (as exc_text) and the stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: log what we can, scrubbed
            message = f"{record.msg!r} {record.args!r}"
        record.msg, record.args = scrub_log_text(message), None
        if record.exc_info:
            text = record.exc_text or "".join(traceback.format_exception(*record.exc_info))
            record.exc_text = scrub_log_text(text.rstrip("\n"))
            record.exc_info = None  # the raw exception (and its locals) goes no further
        elif record.exc_text:
            record.exc_text = scrub_log_text(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub_log_text(record.stack_info)
        return True
