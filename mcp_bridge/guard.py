"""`guard install|uninstall|check`: a git pre-commit hook that knows about other agents' leases.

Leases are advisory, so by default the hook only warns: "src/payments/api.py is held by bo
until 10:40Z". With `--strict` it blocks the commit instead. It reads the cached roster
(no network, no server import) and chains any pre-commit hook that was there before.

Which staged path a lease covers is mcp_bridge.contract.globs.covers: the rule the server
uses for contention and staleness, so the guard warns exactly where the server would.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from mcp_bridge import contract
from mcp_bridge.contract.globs import covers

if TYPE_CHECKING:
    from collections.abc import Mapping

MARK = "# ctxlake-guard"
CHAINED = "pre-commit.ctxlake-chained"


# -- the check -----------------------------------------------------------------------------

class Hold(NamedTuple):
    """One live lease of another agent, as the roster states it."""

    holder: str
    pattern: str
    expires_at: str
    reason: str | None = None


def live_holds(roster: Any, me: str, now: dt.datetime) -> tuple[list[Hold], list[str]]:
    """Other agents' live leases, and what in the roster could not be read (never guessed).

    The one reader of the roster's lease shape for both the git guard and the PreToolUse
    hook. A field of the wrong type is a problem to report, not a lease to skip silently:
    a roster whose leases cannot be read must not look like a roster with no leases.
    """
    holds: list[Hold] = []
    problems: list[str] = []
    agents = roster.get("agents") if isinstance(roster, dict) else None
    if not isinstance(agents, list):
        return [], [f"{contract.ROSTER}: agents is not a list"]
    for i, agent in enumerate(agents):
        holder = agent.get("agent_id") if isinstance(agent, dict) else None
        leases = agent.get("leases", []) if isinstance(agent, dict) else None
        if not isinstance(holder, str) or not isinstance(leases, list):
            problems.append(f"{contract.ROSTER}: agents[{i}] has no agent_id string or no "
                            "leases list")
            continue
        if holder == me:
            continue
        for j, lease in enumerate(leases):
            pattern = lease.get("path") if isinstance(lease, dict) else None
            raw_until = lease.get("expires_at") if isinstance(lease, dict) else None
            until = contract.parse_time(raw_until)
            reason = lease.get("reason") if isinstance(lease, dict) else None
            if not isinstance(pattern, str) or until is None:
                problems.append(f"{contract.ROSTER}: {holder}'s lease [{j}] has no path string "
                                "or no ISO expires_at")
                continue
            if until > now:
                holds.append(Hold(holder, pattern, str(raw_until),
                                  reason if isinstance(reason, str) and reason else None))
    return holds, problems


def conflicts(holds: list[Hold], paths: list[str]) -> list[tuple[str, Hold]]:
    """(path, hold) for each path another agent's live lease covers."""
    return [(path, hold) for hold in holds for path in paths if covers(hold.pattern, path)]


def staged_paths(repo: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Every path the commit touches; a rename counts as both its old and its new path.

    `--no-renames` lists a rename as a deletion plus an addition, so moving a file out of
    another agent's leased folder is seen on the side it leaves, as `git rm` would be.
    """
    import subprocess

    done = subprocess.run(["git", "diff", "--cached", "--name-only", "-z", "--no-renames",
                           "--diff-filter=ACDMRT"], cwd=repo, capture_output=True, check=True,
                          env=env)
    return [p for p in done.stdout.decode("utf-8", "replace").split("\0") if p]


def roster_holds(cfg: Any) -> tuple[list[Hold] | None, str | None]:
    """(holds, None), or (None, why the leases cannot be checked). Reads the cached roster."""
    if cfg.problems:
        return None, "; ".join(cfg.problems)
    read = _cache(cfg.fleet_cache, cfg.fleet).read(contract.ROSTER)
    if read.value is None:
        return None, read.note
    holds, problems = live_holds(read.value, cfg.agent, dt.datetime.now(dt.UTC))
    if problems and not holds:
        return None, "; ".join(problems[:3])
    return holds, ("; ".join(problems[:3]) if problems else None)


@lru_cache(maxsize=8)
def _cache(fleet_dir: Path, fleet: str) -> Any:
    """One Cache per fleet directory, so a bridge answering hooks (mcp_bridge.hook_door)
    parses the roster again only when a render replaced it (Cache keys its files by
    inode, mtime and size); a hook process reads it once either way."""
    from mcp_bridge.cache import Cache

    return Cache(fleet_dir, fleet=fleet)


def check(*, strict: bool, repo: Path, out: Any = None) -> int:
    out = out or sys.stderr
    from mcp_bridge.config import Config

    holds, note = roster_holds(Config.from_env())
    if holds is None:
        out.write(f"ctxlake guard: not checking leases ({note})\n")
        return 0
    if note:
        out.write(f"ctxlake guard: some leases could not be read ({note})\n")
    found = conflicts(holds, staged_paths(repo))
    for path, hold in found:
        out.write(f"ctxlake guard: {path} is leased by {hold.holder} ({hold.pattern}) until "
                  f"{hold.expires_at}\n")
    if found and strict:
        out.write("ctxlake guard: commit blocked (--strict). Coordinate with the holder, or "
                  "commit with --no-verify if you must.\n")
        return 1
    if found:
        out.write("ctxlake guard: leases are advisory; committing anyway.\n")
    return 0


# -- install -------------------------------------------------------------------------------

def hooks_dir(repo: Path) -> Path:
    import subprocess

    done = subprocess.run(["git", "rev-parse", "--git-path", "hooks"], cwd=repo,
                          capture_output=True, text=True, check=True)
    return (repo / done.stdout.strip()).resolve()


def hook_script(*, strict: bool, env: dict[str, str], python: str) -> str:
    import shlex

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
    hook.chmod(hook.stat().st_mode | 0o111)  # executable by whoever could read it
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
    import subprocess

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
