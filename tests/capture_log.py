"""Waiting for the detached capture process to finish, by its own word, not by the clock.

The SessionEnd/PreCompact hook starts `python -m mcp_bridge capture-session` detached and
returns; the process spools its candidates (and, at the end, the session.end) and then
writes one line to $CTXLAKE_HOME/logs/capture.log. Once that line is there, the process
has written everything it ever will, so a test may assert what is (and is not) spooled.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mcp_bridge.capture import run

WAIT_SECS = 120.0  # a generous deadline for a hang; a finished capture returns at once


def finished(home: Path, session: str | None = None, phase: str | None = None) -> int:
    """How many capture runs (of `session`, or any; of `phase`, or either) have written their
    closing line."""
    try:
        lines = (home / "logs" / "capture.log").read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return 0
    mark = "ctxlake capture: session " + (f"{session} (" if session is not None else "")
    of_phase = f", {run.CLOSING[phase]}" if phase is not None else ""  # after the mode
    return sum(mark in line and of_phase in line for line in lines)


def wait_until_finished(home: Path, count: int = 1, *, session: str | None = None,
                        phase: str | None = None, context: Callable[[], str] = str) -> None:
    """Wait until `count` capture runs (of `session`, or any; of `phase`, or either) have
    finished. A session that compacted has a PreCompact run's line too: waiting for its end
    names phase "end", or that line would count."""
    deadline = time.monotonic() + WAIT_SECS
    while finished(home, session, phase) < count:
        if time.monotonic() > deadline:
            log = home / "logs" / "capture.log"
            raise AssertionError(
                f"{finished(home, session, phase)} of {count} capture run(s) finished within "
                f"{WAIT_SECS:.0f} s; capture.log: "
                f"{log.read_text(errors='replace') if log.exists() else '(none)'}\n{context()}")
        time.sleep(0.05)
