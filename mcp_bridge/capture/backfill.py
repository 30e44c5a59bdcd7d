"""`python -m mcp_bridge capture --since 30d`: capture existing local transcripts once each.

Finds Claude Code transcripts (`~/.claude/projects/*/*.jsonl`, or --claude-dir) and Codex
rollouts (`$CODEX_HOME/sessions/**/*.jsonl`, default ~/.codex, or --codex-dir) modified
within --since, and runs the same capture the SessionEnd hook starts on each. Idempotent:
every captured session id is appended to `$CTXLAKE_HOME/capture/<fleet>.captured` (the
hook's captures too), and a session listed there is skipped. A transcript without a
user+assistant exchange records nothing (as the hook).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mcp_bridge.capture import extract, transcript

_SINCE = re.compile(r"^(\d+)([dhm])$")
_UNIT_SECS = {"d": 86_400, "h": 3_600, "m": 60}


def ledger_path(cfg: Any) -> Path:
    return Path(cfg.home) / "capture" / f"{cfg.fleet}.captured"


def captured(cfg: Any) -> set[str]:
    try:
        return set(ledger_path(cfg).read_text("utf-8", "replace").split())
    except OSError:
        return set()


def note_captured(cfg: Any, session: str) -> None:
    """Append `session` to the fleet's ledger (one id a line; O_APPEND, so writers interleave
    whole lines)."""
    path = ledger_path(cfg)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (session.replace("\n", " ").strip() + "\n").encode())
    finally:
        os.close(fd)


def since_secs(value: str) -> int:
    m = _SINCE.match(value.strip())
    if not m:
        raise argparse.ArgumentTypeError("--since takes a number and d, h or m, e.g. 30d")
    return int(m.group(1)) * _UNIT_SECS[m.group(2)]


def transcripts(claude_dir: Path, codex_dir: Path, newer_than: float) -> Iterator[Path]:
    """Transcript files modified after `newer_than` (epoch seconds), oldest first."""
    found = [*claude_dir.glob("*/*.jsonl"), *codex_dir.glob("**/*.jsonl")]
    dated = []
    for path in found:
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        if mtime >= newer_than:
            dated.append((mtime, str(path), path))
    yield from (path for _, _, path in sorted(dated))


def main(argv: list[str], *, command: str = "capture") -> int:
    from mcp_bridge.capture import run
    from mcp_bridge.config import Config

    home = Path.home()
    codex_home = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    p = argparse.ArgumentParser(prog="python -m mcp_bridge capture",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--since", type=since_secs, default=since_secs("30d"),
                   help="only transcripts modified within this long (e.g. 30d, 12h; default 30d)")
    p.add_argument("--claude-dir", type=Path, default=home / ".claude" / "projects")
    p.add_argument("--codex-dir", type=Path, default=codex_home / "sessions")
    p.add_argument("--max-candidates", type=int, default=extract.MAX_CANDIDATES)
    p.add_argument("--dry-run", action="store_true", help="list what would be captured")
    a = p.parse_args(argv)
    cfg = Config.from_env()
    if cfg.problems:
        sys.stderr.write("ctxlake capture: " + "; ".join(cfg.problems) + "\n")
        return 2
    done_ids = captured(cfg)
    paths = list(transcripts(a.claude_dir, a.codex_dir, time.time() - a.since))
    counts = {"captured": 0, "already": 0, "idle": 0, "unknown": 0}
    for i, path in enumerate(paths, start=1):
        where = f"[{i}/{len(paths)}] {path}"
        try:
            t = transcript.read(path)
        except OSError as e:
            print(f"{where}: cannot read ({e})", flush=True)
            continue
        if t.format == "unknown":
            counts["unknown"] += 1
            print(f"{where}: unknown format, skipped", flush=True)
            continue
        session = (t.session_id or path.stem)[:128]
        if session in done_ids:
            counts["already"] += 1
            print(f"{where}: session {session} already captured", flush=True)
            continue
        kinds = {s.kind for s in t.steps}
        if not {"user", "assistant"} <= kinds:
            counts["idle"] += 1
            print(f"{where}: session {session} has no exchange, nothing recorded", flush=True)
            continue
        if a.dry_run:
            print(f"{where}: would capture session {session}", flush=True)
            continue
        done = run.capture(cfg, path=str(path), session=session, reason="backfill",
                           max_candidates=max(0, a.max_candidates), parsed=t)
        done_ids.add(session)
        counts["captured"] += 1
        print(f"{where}: session {session}: outcome {done['outcome']}, "
              f"{done['candidates']} candidate(s)", flush=True)
    print("ctxlake capture: " + ", ".join(f"{v} {k}" for k, v in counts.items())
          + (" (dry run)" if a.dry_run else ""), flush=True)
    return 0
