"""Hermes Agent, pinned, installed once outside the repository (as npm_clients.py does for
the npm clients).

Hermes is a Python program from PyPI, not an npm package, so it gets its own virtualenv:
`hermes-requirements.txt` beside this file pins `hermes-agent[mcp]` and everything it
resolved to, and `pip install -r` installs exactly that into `<cache>/hermes-<digest>/`,
where `<cache>` is npm_clients' (so one directory holds every real client) and the digest
covers the pins and the interpreter's version. Hermes 0.19 needs Python 3.11-3.13: the
venv is made with the interpreter running this file when it fits.

Stdlib only: `./ctxlake test` runs this file before pytest (the download shows up front,
once), and the Hermes test's fixture calls `ensure()` too. PyPI out of reach is the one
reason to skip; any other failure is a failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__:
    from tests.realclients.npm_clients import STAMP, UNUSED_SECS, Status, cache_root
else:  # run as a script by ./ctxlake test
    from npm_clients import STAMP, UNUSED_SECS, Status, cache_root  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
PINS = HERE / "hermes-requirements.txt"
PREFIX = "hermes-"
INSTALL_TIMEOUT_SECS = 1200
#: Python versions hermes-agent 0.19.0 declares (Requires-Python: <3.14,>=3.11).
PYTHONS = ((3, 11), (3, 13))


def pinned() -> str:
    """The pinned top-level requirement (the file's first one)."""
    return next(line.strip() for line in PINS.read_text().splitlines()
                if line.strip() and not line.startswith("#"))


def prefix() -> Path:
    h = hashlib.sha256(PINS.read_bytes())
    h.update(f"{sys.version_info[0]}.{sys.version_info[1]}".encode())
    return cache_root() / f"{PREFIX}{h.hexdigest()[:16]}"


def hermes() -> Path:
    """The installed `hermes` command."""
    return prefix() / "bin" / "hermes"


def ensure(say: object = None) -> Status:
    """Install the pinned Hermes unless this pinned set is already installed."""
    log = say if callable(say) else (lambda _text: None)
    target = prefix()
    if (target / STAMP).exists():
        (target / STAMP).touch()  # in use: not pruned by another checkout's install
        return Status(True)
    low, high = PYTHONS
    if not low <= sys.version_info[:2] <= high:
        return Status(False, f"hermes-agent 0.19 needs Python 3.11-3.13; this is "
                             f"{sys.version.split()[0]}")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install-hermes.lock", "w") as lock:  # two runs at once install once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / STAMP).exists():
            return Status(True)
        shutil.rmtree(target, ignore_errors=True)
        log(f"installing {pinned()} from PyPI into {target} (once per pinned set; ~250 MB)")
        try:
            subprocess.run([sys.executable, "-m", "venv", str(target)], check=True,
                           capture_output=True, text=True, timeout=300)
            done = subprocess.run(
                [str(target / "bin" / "python"), "-m", "pip", "install", "--no-input",
                 "--disable-pip-version-check", "-q", "-r", str(PINS)],
                capture_output=True, text=True, timeout=INSTALL_TIMEOUT_SECS)
        except subprocess.CalledProcessError as e:
            return _failed(target, f"python -m venv failed: {e.stderr[-2000:]}")
        except subprocess.TimeoutExpired:
            return _failed(target, f"pip install took over {INSTALL_TIMEOUT_SECS} s")
        if done.returncode != 0:
            return _failed(target, (done.stderr or done.stdout)[-2000:])
        (target / STAMP).write_text(pinned() + "\n")
        for old in root.glob(f"{PREFIX}*"):
            stamp = old / STAMP
            if old != target and stamp.exists() and (
                    time.time() - stamp.stat().st_mtime > UNUSED_SECS):
                shutil.rmtree(old, ignore_errors=True)
    return Status(True)


def _failed(target: Path, detail: str) -> Status:
    shutil.rmtree(target, ignore_errors=True)
    unreachable = any(mark in detail for mark in (
        "No matching distribution", "Could not find a version", "NewConnectionError",
        "Failed to establish a new connection", "Temporary failure in name resolution"))
    if unreachable:
        return Status(False, f"PyPI is unreachable from here: {detail[-300:]}", unreachable=True)
    return Status(False, f"pip install failed with PyPI reachable:\n{detail}")


def main() -> int:
    def say(text: str) -> None:
        print(f"ctxlake: {text}", flush=True)

    status = ensure(say)
    if status.ready:
        return 0
    if status.unreachable:
        say(f"the Hermes test will skip: {status.reason}")
        return 0
    say(f"installing Hermes failed; its test will fail: {status.reason}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
