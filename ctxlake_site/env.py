"""Typed readers for environment variables, and the one way a bad value stops a process.

Every setting that comes from the environment goes through one of these, so a bad value
fails at start-up with one message naming the variable, its value and what is allowed,
instead of surfacing later as a confusing error deep inside Django. `load_settings_or_exit`
(called by manage.py, wsgi.py and asgi.py before Django starts) turns that message into a
single line on stderr and exit status 2 — never a traceback.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from collections.abc import Iterable

from django.core.exceptions import ImproperlyConfigured

BAD_SETTING_EXIT = 2  # the exit status of a process refused for a bad setting
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
BOOLEANS = "true/false, 1/0, yes/no, on/off"


class BadSetting(ImproperlyConfigured):
    """A variable with a value outside what it allows; str() is the whole message."""

    def __init__(self, name: str, raw: str, allowed: str) -> None:
        super().__init__(f"{name}={_shown(raw)!r} is not allowed: {allowed}")
        self.name = name


def _shown(raw: str) -> str:
    """The value as the message may show it: a URL's password never reaches a log."""
    return _URL_PASSWORD.sub(r"\1***@", raw)


_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@/\s]*@")


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    """Unset means the default; set, it must say yes or no (empty is neither)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadSetting(name, raw, f"a boolean ({BOOLEANS}); unset it for the default")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    allowed = "an integer" + ("" if minimum is None else f" of at least {minimum}")
    try:
        value = int(raw.strip())
    except ValueError:
        raise BadSetting(name, raw, allowed) from None
    if minimum is not None and value < minimum:
        raise BadSetting(name, raw, allowed)
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blank items are an error, not silently skipped."""
    raw = os.environ.get(name)
    if raw is None:
        return list(default)
    items = [item.strip() for item in raw.split(",")]
    if not raw.strip() or any(not item for item in items):
        raise BadSetting(name, raw, "a comma-separated list without empty items")
    return items


def env_choice(name: str, default: str, choices: Iterable[str]) -> str:
    """One of `choices` (compared case-insensitively, returned as spelled in `choices`)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    by_key = {choice.lower(): choice for choice in choices}
    try:
        return by_key[raw.strip().lower()]
    except KeyError:
        raise BadSetting(name, raw, "one of " + ", ".join(by_key.values())) from None


def env_match(name: str, default: str, pattern: str, allowed: str) -> str:
    """A string that must match `pattern` (fully); `allowed` says so in words."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not re.fullmatch(pattern, raw):
        raise BadSetting(name, raw, allowed)
    return raw


def env_module(name: str, default: str) -> str:
    """A dotted module path that can be imported (checked without importing it)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        found = importlib.util.find_spec(raw.strip()) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise BadSetting(name, raw, f"an importable module path (default {default})")
    return raw.strip()


def load_settings_or_exit() -> None:
    """Load Django's settings now; a bad one ends the process with one line and status 2."""
    from django.conf import settings

    try:
        settings.INSTALLED_APPS  # noqa: B018 (the access is what loads the module)
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"ctxlake: bad setting: {exc}\n")
        sys.stderr.flush()
        raise SystemExit(BAD_SETTING_EXIT) from None
