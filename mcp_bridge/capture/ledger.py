"""What the capture remembers about a session between its hooks, on this host.

Two small files per live session under $CTXLAKE_HOME/capture/<fleet>/:

- `<session>.start`: the commit the work tree was at when the session started (its
  SessionStart hook writes it; `git diff --name-only <commit>` at the end then finds the
  files the session changed, commits included, even those no edit tool named);
- `<session>.proposed`: one key per candidate already spooled for the session (by a
  PreCompact capture), so the end neither proposes it again nor more than the cap in all.

The start is used once, at the session's end. What was proposed stays after the end, so a
late PreCompact capture or a resumed session's second end proposes only what is new; it
and the per-session lock file are pruned after PRUNE_AFTER_SECS by a later session start.
Stdlib only; the start side runs inside the SessionStart hook, so it reads git's files
directly instead of starting `git`.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from pathlib import Path
from typing import Any, cast

PRUNE_AFTER_SECS = 7 * 86_400
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


def folder(cfg: Any) -> Path:
    return cast(Path, Path(cfg.home) / "capture" / cfg.fleet)  # cfg: a Config, kept untyped


def _name(session: str) -> str:
    """A file name for any session id (ids are printable but may hold '/')."""
    return hashlib.sha256(session.encode("utf-8", "replace")).hexdigest()[:32]


def key(claim: str) -> str:
    """One candidate's identity within a session: its words, case and spacing ignored."""
    return hashlib.sha256(" ".join(claim.lower().split()).encode()).hexdigest()[:24]


# -- the start commit ------------------------------------------------------------------------

def git_head(start: Path) -> str | None:
    """The commit HEAD names in the work tree enclosing `start`, read from git's files.

    Handles a linked work tree (`.git` is a file naming the git dir, refs live in its
    `commondir`), a detached HEAD, loose refs and packed-refs. None when anything is odd.
    """
    for top in (start, *start.parents):
        dot = top / ".git"
        if dot.exists():
            break
    else:
        return None
    try:
        gitdir = dot
        if dot.is_file():
            text = dot.read_text("utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            gitdir = (top / text.removeprefix("gitdir:").strip()).resolve()
        common = gitdir
        if (gitdir / "commondir").is_file():
            common = (gitdir / (gitdir / "commondir").read_text("utf-8").strip()).resolve()
        head = (gitdir / "HEAD").read_text("utf-8").strip()
        if _SHA.match(head):
            return head
        if not head.startswith("ref: "):
            return None
        ref = head.removeprefix("ref: ").strip()
        for base in (gitdir, common):
            loose = base / ref
            if loose.is_file():
                sha = loose.read_text("utf-8").strip()
                return sha if _SHA.match(sha) else None
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text("utf-8").splitlines():
                sha, _, name = line.partition(" ")
                if name == ref and _SHA.match(sha):
                    return sha
    except (OSError, ValueError):
        return None
    return None  # an unborn branch: no commit yet


def note_start(cfg: Any, session: str, cwd: str) -> str | None:
    """Record the session's start commit (SessionStart); the commit, or None if none."""
    if not session or not cwd:
        return None
    commit = git_head(Path(cwd))
    if commit is None:
        return None
    where = folder(cfg)
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        _prune(where)
        (where / f"{_name(session)}.start").write_text(commit + "\n", "utf-8")
    except OSError:
        return None
    return commit


def take_start(cfg: Any, session: str, *, keep: bool = False) -> str | None:
    """The session's start commit, if its SessionStart recorded one (removed unless keep)."""
    path = folder(cfg) / f"{_name(session)}.start"
    try:
        commit = path.read_text("utf-8").strip()
    except OSError:
        return None
    if not keep:
        path.unlink(missing_ok=True)
    return commit if _SHA.match(commit) else None


def _prune(where: Path) -> None:
    cutoff = time.time() - PRUNE_AFTER_SECS
    for entry in os.scandir(where):
        try:
            if entry.is_file() and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
        except OSError:
            continue


# -- candidates already proposed -------------------------------------------------------------

def proposed(cfg: Any, session: str) -> set[str]:
    try:
        return set((folder(cfg) / f"{_name(session)}.proposed").read_text("utf-8").split())
    except OSError:
        return set()


def note_proposed(cfg: Any, session: str, claim: str) -> None:
    where = folder(cfg)
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(where / f"{_name(session)}.proposed", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                 0o600)
    try:
        os.write(fd, (key(claim) + "\n").encode())
    finally:
        os.close(fd)


def session_lock(cfg: Any, session: str) -> Any:
    """An exclusive lock for one session's captures: a PreCompact capture and the end's
    (separate detached processes) run one after the other, never interleaved. The lock
    file stays (pruned with the rest after PRUNE_AFTER_SECS): removing it while another
    process waits on it would let a third take a new one beside it."""
    from mcp_bridge.contract.spool import Flock

    where = folder(cfg)
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Flock(where / f"{_name(session)}.lock")
