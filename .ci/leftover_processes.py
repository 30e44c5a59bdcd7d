"""Processes a CI test run left behind: `before` snapshots, `check` waits and reports.

    python3 .ci/leftover_processes.py before FILE   # the pids alive before the tests
    python3 .ci/leftover_processes.py check FILE    # exit 1, listing them, if any remain

A leftover is a process that was not alive before the run and still is after a grace
period (detached captures finish, reaping takes a moment), and that the run started: it
carries this run's CI_RUN_MARK in its environment, or its command line is one of ours
(Postgres — the embedded server runs as another user, in an environment of its own —,
the bridge, manage.py, the workers, gunicorn, the agent CLIs, or anything in this
checkout): several tests start processes with a clean environment on purpose. Stdlib only;
reads /proc, so Linux only (elsewhere it says so and passes).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

GRACE_SECS = float(os.environ.get("CI_LEFTOVER_GRACE", 60))


def _alive() -> dict[int, str]:
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state != "Z" and cmd.strip():  # kernel threads have no command line
            found[int(entry.name)] = cmd.strip()
    return found


OURS = ("postgres", "mcp_bridge", "manage.py", "qcluster", "gunicorn", "claude", "codex",
        "hermes", "chrom", "node", str(Path(__file__).resolve().parents[1]))


def _ours(pid: int, cmd: str, marker: str) -> bool:
    if any(word in cmd for word in OURS):
        return True
    try:
        environ = (Path("/proc") / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return bool(marker) and f"CI_RUN_MARK={marker}".encode() in environ.split(b"\0")


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            pid = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("before", "check"):
        sys.stderr.write(__doc__ or "")
        return 2
    if not Path("/proc/self/stat").exists():
        print("leftover check: no /proc here; skipped")
        return 0
    snapshot = Path(argv[1])
    if argv[0] == "before":
        snapshot.write_text("\n".join(str(pid) for pid in _alive()))
        return 0
    before = {int(x) for x in snapshot.read_text().split()}
    marker = os.environ.get("CI_RUN_MARK", "")
    deadline = time.monotonic() + GRACE_SECS
    while True:
        mine = _ancestors()
        left = {pid: cmd for pid, cmd in _alive().items()
                if pid not in before and pid not in mine and _ours(pid, cmd, marker)}
        if not left or time.monotonic() > deadline:
            break
        time.sleep(1)
    for pid, cmd in sorted(left.items()):
        print(f"CI: left running after the tests: pid {pid}: {cmd[:200]}", file=sys.stderr)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
