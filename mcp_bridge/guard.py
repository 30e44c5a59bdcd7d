"""`guard install|uninstall|check`: a git pre-commit hook that knows about other agents' leases.

Leases are advisory, so by default the hook only warns: "src/payments/api.py is held by bo
until 10:40Z". With `--strict` it blocks the commit instead. It reads the cached roster
(no network, no server import) and chains any pre-commit hook that was there before.

The glob semantics are `fleet.globs`' (which the bridge may not import), in stdlib:
`*` and `?` match within one segment, `**` any number of segments, a character class
counts as one character, and a lease on a plain path covers everything beneath it.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import stat
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

MARK = "# ctxlake-guard"
CHAINED = "pre-commit.ctxlake-chained"


# -- globs ---------------------------------------------------------------------------------

def _segments(pattern: str) -> tuple[str, ...]:
    cleaned = pattern.strip().replace("\\", "/")
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    return tuple(seg for seg in cleaned.split("/") if seg not in ("", "."))


def covers(pattern: str, path: str) -> bool:
    """True when the lease `pattern` covers the concrete repo-relative `path`."""
    segs = _segments(pattern)
    if not segs:
        return False
    if segs[-1] != "**":
        segs = (*segs, "**")  # a plain path (or a glob) also holds its subtree
    return _match(segs, _segments(path))


@lru_cache(maxsize=4096)
def _match(p: tuple[str, ...], q: tuple[str, ...]) -> bool:
    if not p:
        return not q
    if p[0] == "**":
        return _match(p[1:], q) or (bool(q) and _match(p, q[1:]))
    return bool(q) and _segment(_tokens(p[0]), q[0]) and _match(p[1:], q[1:])


def _tokens(segment: str) -> tuple[str, ...]:
    out: list[str] = []
    i = 0
    while i < len(segment):
        close = segment.find("]", i + 2) if segment[i] == "[" else -1
        if close != -1:
            out.append("?")
            i = close + 1
            continue
        if not (segment[i] == "*" and out[-1:] == ["*"]):
            out.append(segment[i])
        i += 1
    return tuple(out)


@lru_cache(maxsize=4096)
def _segment(p: tuple[str, ...], s: str) -> bool:
    if not p:
        return not s
    if p[0] == "*":
        return _segment(p[1:], s) or (bool(s) and _segment(p, s[1:]))
    return bool(s) and (p[0] in ("?", s[0])) and _segment(p[1:], s[1:])


# -- the check -----------------------------------------------------------------------------

def conflicts(roster: dict[str, Any], me: str, paths: list[str], now: dt.datetime,
              ) -> list[tuple[str, str, str, str]]:
    """(path, holder, lease pattern, expires_at) for each staged path another agent holds."""
    from mcp_bridge.contract import parse_time

    found = []
    for agent in roster.get("agents") or []:
        holder = agent.get("agent_id") if isinstance(agent, dict) else None
        if not isinstance(holder, str) or holder == me:
            continue
        for lease in agent.get("leases") or []:
            until = parse_time(lease.get("expires_at")) if isinstance(lease, dict) else None
            pattern = lease.get("path") if isinstance(lease, dict) else None
            if until is None or until <= now or not isinstance(pattern, str):
                continue
            hit = [p for p in paths if covers(pattern, p)]
            found += [(p, holder, pattern, lease["expires_at"]) for p in hit]
    return found


def staged_paths(repo: Path) -> list[str]:
    done = subprocess.run(["git", "diff", "--cached", "--name-only", "-z", "--diff-filter=ACDMR"],
                          cwd=repo, capture_output=True, check=True)
    return [p for p in done.stdout.decode("utf-8", "replace").split("\0") if p]


def check(*, strict: bool, repo: Path, out: Any = None) -> int:
    out = out or sys.stderr
    from mcp_bridge import contract
    from mcp_bridge.cache import Cache
    from mcp_bridge.config import Config

    cfg = Config.from_env()
    if cfg.problems:
        out.write("ctxlake guard: not checking leases (" + "; ".join(cfg.problems) + ")\n")
        return 0
    read = Cache(cfg.fleet_cache, fleet=cfg.fleet).read(contract.ROSTER)
    if read.value is None:
        out.write(f"ctxlake guard: not checking leases ({read.note})\n")
        return 0
    found = conflicts(read.value, cfg.agent, staged_paths(repo), dt.datetime.now(dt.UTC))
    for path, holder, pattern, until in found:
        out.write(f"ctxlake guard: {path} is leased by {holder} ({pattern}) until {until}\n")
    if found and strict:
        out.write("ctxlake guard: commit blocked (--strict). Coordinate with the holder, or "
                  "commit with --no-verify if you must.\n")
        return 1
    if found:
        out.write("ctxlake guard: leases are advisory; committing anyway.\n")
    return 0


# -- install -------------------------------------------------------------------------------

def hooks_dir(repo: Path) -> Path:
    done = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=repo,
                          capture_output=True, text=True, check=True)
    return (repo / done.stdout.strip()).resolve()


def hook_script(*, strict: bool, env: dict[str, str], python: str) -> str:
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    flag = " --strict" if strict else ""
    return (f"#!/bin/sh\n{MARK} (python -m mcp_bridge guard install; `guard uninstall` "
            "removes it)\n"
            f'chained="$(dirname "$0")/{CHAINED}"\n'
            'if [ -x "$chained" ]; then "$chained" "$@" || exit $?; fi\n'
            f"{exports}"
            f"exec {shlex.quote(python)} -m mcp_bridge guard check{flag}\n")


def install(repo: Path, *, strict: bool, env: dict[str, str], python: str = sys.executable,
            ) -> str:
    hooks = hooks_dir(repo)
    hooks.mkdir(parents=True, exist_ok=True)
    hook, chained = hooks / "pre-commit", hooks / CHAINED
    if hook.exists() and MARK not in hook.read_text(errors="replace"):
        os.replace(hook, chained)  # keep theirs; ours runs it first
    hook.write_text(hook_script(strict=strict, env=env, python=python))
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return f"installed {hook}" + (f" (chaining {chained})" if chained.exists() else "")


def uninstall(repo: Path) -> str:
    hooks = hooks_dir(repo)
    hook, chained = hooks / "pre-commit", hooks / CHAINED
    if not hook.exists() or MARK not in hook.read_text(errors="replace"):
        return "no ctxlake guard installed: no changes"
    hook.unlink()
    if chained.exists():
        os.replace(chained, hook)
        return f"removed the ctxlake guard; restored the previous {hook}"
    return f"removed {hook}"


def main(argv: list[str], *, command: str = "guard") -> int:
    import argparse

    from mcp_bridge.install import PASSTHROUGH, PROJECT_ROOT

    p = argparse.ArgumentParser(prog="python -m mcp_bridge guard")
    p.add_argument("action", choices=("install", "uninstall", "check"))
    p.add_argument("--strict", action="store_true", help="block (not just warn) on overlap")
    p.add_argument("--repo", type=Path, default=Path.cwd(), help="git repository (default: .)")
    p.add_argument("--fleet", default=os.environ.get("CTXLAKE_FLEET_ID", ""))
    p.add_argument("--agent", default=os.environ.get("CTXLAKE_AGENT_ID", ""))
    a = p.parse_args(argv)
    try:
        if a.action == "check":
            return check(strict=a.strict, repo=a.repo)
        if a.action == "uninstall":
            print(uninstall(a.repo))
            return 0
        if not a.fleet or not a.agent:
            p.error("install needs --fleet and --agent (or CTXLAKE_FLEET_ID/CTXLAKE_AGENT_ID)")
        env = {"CTXLAKE_FLEET_ID": a.fleet, "CTXLAKE_AGENT_ID": a.agent,
               "PYTHONPATH": str(PROJECT_ROOT),
               **{k: os.environ[k] for k in PASSTHROUGH if os.environ.get(k)}}
        print(install(a.repo, strict=a.strict, env=env))
    except (subprocess.CalledProcessError, OSError) as e:
        sys.stderr.write(f"ctxlake guard: {e}\n")
        return 0 if a.action == "check" else 1
    return 0
