"""gunicorn's logger with no secret in the access or error log (`--logger-class`).

The access log's request line, query, referer, path and any request header or environ
atom a custom format could ask for are rewritten by ctxlake_site.logs before gunicorn
formats the line; error-log messages and tracebacks (gunicorn logs the full URI of a
request that crashed) are scrubbed the same way. `./ctxlake up` starts gunicorn with it.
"""

from __future__ import annotations

import re
import traceback
from typing import Any

from gunicorn import glogging

from ctxlake_site.logs import ELIDED, elide_query, loggable_url, scrub_log_text
from mcp_bridge.contract import redact

# Header / environ atoms ("{authorization}i", "{http_cookie}e") never logged as they are.
_SECRET_ATOM = re.compile(r"(?i)authoriz|cookie|token|secret|passw|api[-_]?key|signature")
_URL_ATOM = re.compile(r"(?i)^\{(?:raw_uri|request_uri|http_referer|referer|path_info)\}[ie]$")
_QUERY_ATOM = re.compile(r"(?i)^\{query_string\}e$")


class ScrubbingLogger(glogging.Logger):  # type: ignore[misc]
    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any,
              ) -> dict[str, Any]:
        atoms: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        atoms["r"] = " ".join((str(environ.get("REQUEST_METHOD", "-")),
                               loggable_url(str(environ.get("RAW_URI", ""))),
                               str(environ.get("SERVER_PROTOCOL", "-"))))
        atoms["q"] = elide_query(str(environ.get("QUERY_STRING") or ""))
        atoms["U"] = redact.scrub_text(str(environ.get("PATH_INFO") or ""))
        atoms["f"] = loggable_url(str(environ.get("HTTP_REFERER", "-")))
        atoms["a"] = redact.scrub_text(str(environ.get("HTTP_USER_AGENT", "-")))
        for key, value in list(atoms.items()):
            if not (key.startswith("{") and isinstance(value, str)):
                continue
            if _SECRET_ATOM.search(key):
                atoms[key] = ELIDED
            elif _QUERY_ATOM.match(key):
                atoms[key] = elide_query(value)
            elif _URL_ATOM.match(key):
                atoms[key] = loggable_url(value)
            else:
                atoms[key] = redact.scrub_text(value)
        return atoms

    @staticmethod
    def _text(msg: Any, args: tuple[Any, ...]) -> str:
        try:
            text = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            text = f"{msg!r} {args!r}"
        return scrub_log_text(text)

    def critical(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.error_log.critical(self._text(msg, args))

    def error(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.error_log.error(self._text(msg, args))

    def warning(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.error_log.warning(self._text(msg, args))

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.error_log.info(self._text(msg, args))

    def debug(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.error_log.debug(self._text(msg, args))

    def exception(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.error_log.error(scrub_log_text(f"{self._text(msg, args)}\n"
                                            f"{traceback.format_exc().rstrip()}"))

    def log(self, lvl: Any, msg: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(lvl, str):
            lvl = self.LOG_LEVELS.get(lvl.lower(), 20)
        self.error_log.log(lvl, self._text(msg, args))
