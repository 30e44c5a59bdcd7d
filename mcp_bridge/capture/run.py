"""`python -m mcp_bridge capture-session`: the detached process a SessionEnd hook starts.

It reads the transcript, spools the session's one session.end (record fields merged
with what the hook was told: an explicit --outcome/--summary/--changed-path wins) and
up to --max-candidates claim.proposed events, every string scrubbed by the shared
redactor first. It always exits 0; its notes (counts and ids, never transcript text)
go to stderr, which the hook points at $CTXLAKE_HOME/logs/capture.log.

What it does follows the fleet's capture setting (mcp_bridge.capture.mode): off → the
bare session.end, the transcript unread; candidates → record and deterministic
candidates; candidates+llm → those plus the LLM step's (mcp_bridge.capture.llm).
`--phase compact` (Claude Code's and Codex's PreCompact) spools candidates only, no
session.end; the session's ledger (mcp_bridge.capture.ledger) keeps what it proposed, so
no later capture of the session (its end, a late PreCompact, the end of a resumed
session) proposes the same candidate again or more than the cap in all. Captures of one
session run one at a time (a flock per session).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from mcp_bridge import contract
from mcp_bridge.capture import extract, ledger, llm, record, transcript, used
from mcp_bridge.capture.mode import Mode
from mcp_bridge.contract import redact

#: Each phase a run can be, and how its closing line in capture.log names it, right after
#: "capture <mode>, " (tests wait for a session's end by it: a session that compacted has
#: a line of each).
CLOSING = {"end": "session.end", "compact": "before compaction"}
PHASES = tuple(CLOSING)


def capture(cfg: Any, *, path: str, session: str, reason: str | None = None,
            outcome: str | None = None, summary: str | None = None,
            changed_paths: list[str] | None = None, cwd: str = "",
            max_candidates: int | None = None,
            parsed: transcript.Transcript | None = None, mode: Mode | None = None,
            phase: str = "end", env: dict[str, str] | None = None) -> dict[str, Any]:
    """Spool the candidates and (phase "end") the session.end; returns what was done.

    At the end the session id goes into the fleet's capture ledger, so a later `python -m
    mcp_bridge capture` backfill does not capture it again.
    """
    import os

    from mcp_bridge.capture import mode as modes

    t0 = time.monotonic()
    env = dict(os.environ) if env is None else env
    mode = mode or modes.resolve(cfg, env)
    if max_candidates is None:
        max_candidates = modes.max_candidates(cfg)  # the fleet's setting, from its manifest
    done: dict[str, Any] = {"session": session, "candidates": 0, "notes": [],
                            "mode": mode.value, "end": None, "outcome": None, "why": ""}
    with ledger.session_lock(cfg, session):  # a PreCompact capture and the end's, in turn
        _capture(cfg, done, path=path, session=session, reason=reason, outcome=outcome,
                 summary=summary, changed_paths=changed_paths, cwd=cwd,
                 max_candidates=max_candidates, parsed=parsed, mode=mode, phase=phase, env=env)
    done["secs"] = round(time.monotonic() - t0, 3)
    return done


def _capture(cfg: Any, done: dict[str, Any], *, path: str, session: str, reason: str | None,
             outcome: str | None, summary: str | None, changed_paths: list[str] | None,
             cwd: str, max_candidates: int, parsed: transcript.Transcript | None, mode: Mode,
             phase: str, env: dict[str, str]) -> None:
    """capture()'s work, under the session's lock; fills `done`."""
    from mcp_bridge.contract.spool import Spool

    if mode.reads_transcript:
        try:
            t = parsed or transcript.read(path, session=session)
        except OSError as e:
            t = transcript.Transcript("unknown", notes=[f"cannot read the transcript: {e}"])
    else:
        t = transcript.Transcript("unread", notes=[f"capture is off ({mode.why})"])
    done["format"], done["notes"] = t.format, list(t.notes)
    readable = t.format not in ("unknown", "unread")
    rec = record.build(t, cwd=cwd, start=ledger.take_start(cfg, session, keep=phase != "end")) \
        if readable else record.Record()
    spool = Spool(cfg.spool_dir, fleet=cfg.fleet, agent=cfg.agent, session=session,
                  max_bytes=cfg.spool_max_bytes, file_max_bytes=cfg.spool_file_max_bytes)
    more: list[extract.Candidate] = []
    if readable and mode.wants_llm:
        more, notes = llm.distill(cfg, t.steps, env)
        done["notes"] += notes
    found = (extract.candidates(t.steps, cap=2 * max(max_candidates, 1), relative=rec.relative,
                                more=more) if readable else [])
    proposed = ledger.proposed(cfg, session)
    room = max(0, max_candidates - len(proposed))
    fresh = [c for c in found if ledger.key(c.claim) not in proposed][:room]
    fresh, withheld = _screened(fresh)
    done["withheld"] = len(withheld)
    if withheld:
        done["notes"].append(f"{len(withheld)} candidate(s) withheld: instruction-like text")
    for c in fresh:  # candidates first: the session.end closes the session's story
        try:
            spool.append(contract.KIND_CLAIM_PROPOSED,
                         redact.scrub_value(c.payload(session, rec.repo)))
            done["candidates"] += 1
            ledger.note_proposed(cfg, session, c.claim)
        except ValueError as e:  # Refused: one bad candidate must not cost the others
            done["notes"].append(f"{c.extractor} candidate refused: {e}")
    done["outcome"], done["why"] = None, rec.why
    if phase == "end":
        payload = _end_payload(rec, reason=reason, outcome=outcome, summary=summary,
                               changed_paths=changed_paths)
        used_ids = _used(cfg, t.steps, payload.get("changed_paths") or [], done) \
            if readable else []
        if used_ids:  # absent when none, as older drains expect
            payload["used"] = used_ids
        if withheld:  # recorded for moderators (never proposed); absent when none
            payload["withheld"] = [
                {"extractor": c.extractor, "text": c.claim[:contract.events.CLAIM_MAX_CHARS]}
                for c in withheld[:contract.events.WITHHELD_MAX]]
        done["end"] = spool.append(contract.KIND_SESSION_END,
                                   redact.scrub_value(payload)).event_id
        done["outcome"] = payload.get("outcome")
        try:
            from mcp_bridge.capture.backfill import note_captured

            note_captured(cfg, session)
        except OSError as e:
            done["notes"].append(f"capture ledger not updated: {e}")


def _used(cfg: Any, steps: list[transcript.Step], changed: list[str],
          done: dict[str, Any]) -> list[str]:
    """The promoted claims (as of this host's snapshot) the session cited or acted on;
    [] when there is no snapshot. Never raises: a broken snapshot costs the record."""
    from mcp_bridge.cache import Cache

    try:
        cache = Cache(cfg.fleet_cache, fleet=cfg.fleet)
        snap = cache.snapshot().value
        if snap is None:
            return []
        start = (cache.manifest().value or {}).get("briefing_claims") or []
        known = {i: used.Known(text, paths) for i, (text, paths) in snap.known().items()}
        return used.used_claims(steps, known, changed=changed,
                                shown_at_start=[i for i in start if isinstance(i, str)])
    except Exception as e:
        done["notes"].append(f"used claims not recorded: {type(e).__name__}: {e}")
        return []


def _screened(found: list[extract.Candidate],
              ) -> tuple[list[extract.Candidate], list[extract.Candidate]]:
    """(to propose, to hold back): a candidate whose text or any excerpt the instruction
    screen flags is never proposed; session.end records it for moderators instead."""
    from mcp_bridge.contract import screen

    keep: list[extract.Candidate] = []
    held: list[extract.Candidate] = []
    for c in found:
        texts = [c.claim, *(excerpt for _, excerpt in c.cites)]
        (held if any(screen.screen_text(t).flagged for t in texts) else keep).append(c)
    return keep, held


def _end_payload(rec: record.Record, *, reason: str | None, outcome: str | None,
                 summary: str | None, changed_paths: list[str] | None) -> dict[str, Any]:
    """The session.end payload: the record, with what the hook was told winning."""
    payload = rec.payload()
    if outcome is not None:
        payload["outcome"] = outcome
    if summary and summary.strip():
        payload["summary"] = summary.strip()[:contract.events.SUMMARY_MAX_CHARS]
    extra = [p.strip() for p in changed_paths or [] if p.strip()]
    if extra:
        merged = list(dict.fromkeys([*payload.get("changed_paths", []), *extra]))
        payload["changed_paths"] = merged[:contract.events.CHANGED_PATHS_MAX]
    if isinstance(reason, str) and reason:
        payload["reason"] = reason[:contract.events.END_REASON_MAX_CHARS]
    return payload


def main(argv: list[str], *, command: str = "capture-session") -> int:
    """Never raises; exit 0 whatever happens (the hook already returned)."""
    try:
        return _main(argv)
    except SystemExit as e:
        return 0 if e.code in (0, None) else 0
    except Exception as e:  # noqa: BLE001 - report, never propagate
        sys.stderr.write(f"ctxlake capture: {type(e).__name__}: {e}\n")
        return 0


def _main(argv: list[str]) -> int:
    from mcp_bridge.config import Config

    p = argparse.ArgumentParser(prog="python -m mcp_bridge capture-session")
    p.add_argument("--transcript", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--cwd", default="")
    p.add_argument("--reason", default=None)
    p.add_argument("--outcome", choices=contract.SESSION_OUTCOMES, default=None)
    p.add_argument("--summary", default=None)
    p.add_argument("--changed-path", action="append", dest="changed_paths", default=None)
    p.add_argument("--max-candidates", type=int, default=None,
                   help="at most this many candidates (default: the fleet's setting)")
    p.add_argument("--phase", choices=PHASES, default="end",
                   help="end (SessionEnd: candidates and the session.end) or compact "
                        "(PreCompact: candidates only)")
    a = p.parse_args(argv)
    cfg = Config.from_env()
    if cfg.problems:
        sys.stderr.write("ctxlake capture: nothing queued: " + "; ".join(cfg.problems) + "\n")
        return 0
    done = capture(cfg, path=a.transcript, session=a.session, reason=a.reason,
                   outcome=a.outcome, summary=a.summary, changed_paths=a.changed_paths,
                   cwd=a.cwd, phase=a.phase,
                   max_candidates=None if a.max_candidates is None else max(0, a.max_candidates))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ended = (f"{CLOSING['end']} {done['end']} outcome={done['outcome']} [{done['why']}]"
             if a.phase == "end" else CLOSING["compact"])
    line = (f"{stamp} ctxlake capture: session {done['session']} ({done['format']}): "
            f"capture {done['mode']}, {ended}, {done['candidates']} candidate(s), "
            f"{done['secs']}s"
            + "".join(f"; {n}" for n in done["notes"]))
    # `why` quotes the last check's command line, which may carry a token (FOO_TOKEN=… make)
    sys.stderr.write(redact.scrub_text(line) + "\n")
    return 0
