"""The real clients the suite drives, pinned, and installed once outside the repository.

`package.json` and `package-lock.json` beside this file pin Claude Code, the MCP Inspector,
Codex and the Node they run on (the Inspector needs Node ≥ 22.19; Debian's is 18, so Node
itself comes from the npm registry as the `node` package). `npm ci` installs exactly the
lockfile into `<cache>/<digest of the two files>/`: once per pinned set, never inside the
checkout. The cache is $CTXLAKE_NPM_DIR, else ~/.cache/ctxlake-npm (XDG_CACHE_HOME
honoured); an install of a new pinned set removes the sets no run has used for a week (each
is ~1 GB; a set another checkout still uses stays).

Stdlib only: `./ctxlake test` runs this file with the system Python before pytest (so the
download shows up front, once), and the tests' fixture calls `ensure()` too, for a plain
`pytest` run. A registry that cannot be reached is the one reason to skip; any other
failure is reported as a failure.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PINS = (HERE / "package.json", HERE / "package-lock.json")
STAMP = ".ctxlake-installed"
INSTALL_TIMEOUT_SECS = 1200
UNUSED_SECS = 7 * 24 * 3600


def cache_root() -> Path:
    explicit = os.environ.get("CTXLAKE_NPM_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "ctxlake-npm"


def digest() -> str:
    h = hashlib.sha256()
    for path in PINS:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def prefix() -> Path:
    return cache_root() / digest()


def pinned() -> dict[str, str]:
    """Package → pinned version, from package.json."""
    deps = json.loads(PINS[0].read_text())["dependencies"]
    return {str(k): str(v) for k, v in deps.items()}


def bin_dir() -> Path:
    return prefix() / "node_modules" / ".bin"


def run_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with the pinned Node and clients first on PATH (their `#!/usr/bin/env node`)."""
    return {**env, "PATH": f"{bin_dir()}{os.pathsep}{env.get('PATH', os.defpath)}"}


@dataclass(frozen=True)
class Status:
    """ready, or why not; `unreachable` marks the one case where tests skip."""

    ready: bool
    reason: str = ""
    unreachable: bool = False


def ensure(say: object = None) -> Status:
    """Install the pinned clients unless this pinned set is already installed."""
    log = say if callable(say) else (lambda _text: None)
    target = prefix()
    if (target / STAMP).exists():
        os.utime(target / STAMP)  # in use: not pruned by another checkout's install
        return Status(True)
    npm = shutil.which("npm")
    if npm is None:
        return Status(False, "npm is not on PATH (`./ctxlake test` installs Node and npm from "
                             "Debian's packages)", unreachable=True)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install.lock", "w") as lock:  # two runs at once install once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / STAMP).exists():
            return Status(True)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for path in PINS:
            shutil.copy2(path, target / path.name)
        log(f"installing {', '.join(f'{k}@{v}' for k, v in pinned().items())} from npm "
            f"into {target} (once per pinned set; ~1 GB)")
        try:
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                                  cwd=target, capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            return _failed(npm, target, f"npm ci took over {INSTALL_TIMEOUT_SECS} s")
        if done.returncode != 0:
            return _failed(npm, target, (done.stderr or done.stdout)[-2000:])
        (target / STAMP).write_text(json.dumps(pinned()) + "\n")
        for old in root.iterdir():
            stamp = old / STAMP
            if old != target and stamp.exists() and (
                    time.time() - stamp.stat().st_mtime > UNUSED_SECS):
                shutil.rmtree(old, ignore_errors=True)
    return Status(True)


def _failed(npm: str, target: Path, detail: str) -> Status:
    shutil.rmtree(target, ignore_errors=True)
    try:
        ping = subprocess.run([npm, "ping"], capture_output=True, timeout=60).returncode
    except subprocess.TimeoutExpired:
        ping = 1
    if ping != 0:
        return Status(False, "the npm registry is unreachable from here", unreachable=True)
    return Status(False, f"npm ci failed with the registry reachable:\n{detail}")


def main() -> int:
    def say(text: str) -> None:
        print(f"ctxlake: {text}", flush=True)

    status = ensure(say)
    if status.ready:
        return 0
    if status.unreachable:
        say(f"real-client tests will skip: {status.reason}")
        return 0
    say(f"installing the real clients failed; their tests will fail: {status.reason}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
