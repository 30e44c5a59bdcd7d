"""`hook session-start|session-end|pre-compact|pre-tool-use`: what a runtime runs around a session.

A hook runs inside the host's turn, so three rules hold whatever happens:
1. it is fast (session hooks ~100 ms, pre-tool-use 50 ms): stdlib plus the stdlib-only
   bridge modules, never the mcp SDK (≈0.6 s to import), never numpy, never the snapshot;
2. it never fails the turn: every error goes to stderr and the exit status is 0;
3. it never touches the network: it reads the local cache and appends to the spool.

Sessions are real (DESIGN.md): session-start leaves the runtime's session id where the
bridge that runtime spawned will find it, and session-end records a session only if it
did something, so `claude mcp list` (which fires SessionEnd) leaves no trace.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from collections.abc import Mapping

from mcp_bridge import contract, pretool
from mcp_bridge.config import Config

OUTCOMES = contract.SESSION_OUTCOMES


def read_hook_input(stream: Any = None, wait: float = pretool.STDIN_WAIT_SECS,
                    ) -> dict[str, Any]:
    """The runtime's hook JSON from stdin ({} for a terminal, silence or anything not JSON)."""
    try:
        value = json.loads(pretool.read_stdin(stream, wait) or b"{}")
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def hermes_first_turn(hook_input: dict[str, Any]) -> bool:
    """Hermes Agent (0.19) has no SessionStart that can add context: its shell hook
    `pre_llm_call` can, and fires every turn with `extra.is_first_turn`; the briefing goes
    into the first one only (on_session_start's output is ignored)."""
    extra = hook_input.get("extra")
    return isinstance(extra, dict) and extra.get("is_first_turn") is True


def session_start(cfg: Config, hook_input: dict[str, Any], *, fmt: str) -> str:
    """The briefing, wrapped the way the runtime wants it on stdout."""
    from mcp_bridge.cache import Cache

    if fmt == "hermes" and not hermes_first_turn(hook_input):
        return ""

    leave_session(cfg, hook_input)
    if cfg.problems:
        text = "ctxlake: no briefing (" + "; ".join(cfg.problems) + ")"
    else:
        note_start(cfg, hook_input)
        cache = Cache(cfg.fleet_cache, fleet=cfg.fleet)
        text = cache.briefing() or (
            f"ctxlake: no briefing rendered yet for fleet {cfg.fleet!r}.")
        note_briefing_served(cfg, hook_input, cache)
    if fmt == "plain":
        return text if text.endswith("\n") else text + "\n"
    if fmt == "hermes":  # pre_llm_call: {"context"} goes into the turn's user message
        return json.dumps({"context": text}, ensure_ascii=False) + "\n"
    out = {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}
    return json.dumps(out, ensure_ascii=False) + "\n"


def note_briefing_served(cfg: Config, hook_input: dict[str, Any], cache: Any) -> None:
    """Spool which claims the briefing showed this session (claim.served, via briefing).
    Not after a compaction: the session was shown them when it started."""
    from mcp_bridge.config import clean_session
    from mcp_bridge.contract import events as ev
    from mcp_bridge.contract.spool import Spool
    from mcp_bridge.served import claim_ids

    session = clean_session(hook_input.get("session_id"))
    ids = (cache.manifest().value or {}).get("briefing_claims")
    if not session or not isinstance(ids, list) or hook_input.get("source") == "compact":
        return
    valid = claim_ids(ids)
    if valid:
        spool = Spool(cfg.spool_dir, fleet=cfg.fleet, agent=cfg.agent, session=session,
                      max_bytes=cfg.spool_max_bytes, file_max_bytes=cfg.spool_file_max_bytes)
        try:
            spool.append(ev.KIND_CLAIM_SERVED, {"claims": valid, "via": "briefing"})
        except (OSError, ValueError) as e:  # the briefing still goes out
            sys.stderr.write(f"ctxlake hook: briefing not recorded as served: {e}\n")


def note_start(cfg: Config, hook_input: dict[str, Any]) -> None:
    """Note the commit the session starts at, for its capture's `git diff` (if capture is on).

    Not after a compaction (`source: "compact"`: Codex and Claude Code run SessionStart
    again then): the session goes on, and its start commit stays the one it started at.
    """
    from mcp_bridge.capture import ledger, mode
    from mcp_bridge.config import clean_session

    session, cwd = clean_session(hook_input.get("session_id")), hook_input.get("cwd")
    if session and isinstance(cwd, str) and cwd and hook_input.get("source") != "compact" and \
            mode.resolve(cfg, os.environ).reads_transcript:
        ledger.note_start(cfg, session, cwd)


MAX_CHANGED_PATHS = 200
def leave_session(cfg: Config, hook_input: dict[str, Any]) -> Path | None:
    """Record the runtime's session id for the bridge it spawns (Config.resolve_session)."""
    from mcp_bridge.config import clean_session, process_started, runtime_pid, session_file
    from mcp_bridge.contract import atomic

    session = clean_session(hook_input.get("session_id"))
    if not session:
        return None
    pid = runtime_pid()
    path = session_file(cfg.home, pid)
    body = {"pid": pid, "started": process_started(pid), "session_id": session}
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic.write_atomic(path, json.dumps(body).encode(), mode=0o600)
        _prune(path.parent)
    except OSError as e:
        sys.stderr.write(f"ctxlake hook: cannot record the session for the bridge: {e}\n")
        return None
    return path


def _prune(folder: Path) -> None:
    """Drop files left for runtimes that are gone (crashed, killed: no SessionEnd)."""
    from mcp_bridge.config import runtime_session

    for name in os.listdir(folder):
        stem = name.removesuffix(".json")
        if stem.isdigit() and runtime_session(folder.parent, int(stem)) is None:
            (folder / name).unlink(missing_ok=True)


def forget_session(cfg: Config, session: str) -> None:
    from mcp_bridge.config import runtime_pid, runtime_session, session_file

    pid = runtime_pid()
    if runtime_session(cfg.home, pid) == session:
        session_file(cfg.home, pid).unlink(missing_ok=True)


MAX_TRANSCRIPT_LINES = 200_000


def transcript_has_exchange(path: Any) -> bool:
    """True when the runtime's transcript (JSONL) holds a user turn and an assistant turn.

    Claude Code writes `{"type": "user"|"assistant", ...}`; a Codex rollout writes
    `{"type": "response_item", "payload": {"type": "message", "role": ...}}`.
    """
    if not isinstance(path, str) or not path:
        return False
    seen: set[str] = set()
    try:
        with open(os.path.expanduser(path), "rb") as f:
            for n, line in enumerate(f):
                if n >= MAX_TRANSCRIPT_LINES:
                    break
                if b'"user"' not in line and b'"assistant"' not in line:
                    continue
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                kind = entry.get("type") if isinstance(entry, dict) else None
                if kind == "response_item" and isinstance(entry.get("payload"), dict) and \
                        entry["payload"].get("type") == "message":
                    kind = entry["payload"].get("role")
                if kind in ("user", "assistant") and not entry.get("isMeta"):
                    seen.add(kind)
                    if len(seen) == 2:
                        return True
    except OSError:
        return False
    return False


def spooled_by(cfg: Config, session: str) -> bool:
    """True when the fleet's local spool holds a write stamped with `session`."""
    needle = ('"session":' + json.dumps(session, ensure_ascii=True)).encode()
    folder = cfg.spool_dir / contract.SPOOL_SUBDIR
    try:
        names = [n for n in os.listdir(folder)
                 if n.startswith(cfg.fleet + ".") and n.endswith(contract.SPOOL_SUFFIX)]
    except OSError:
        return False
    for name in names:
        try:
            with open(folder / name, "rb") as f:
                if any(needle in line for line in f):
                    return True
        except OSError:
            continue
    return False


def hermes_end_input(hook_input: dict[str, Any], env: Any = None) -> dict[str, Any]:
    """Hermes' on_session_finalize stdin as the session-end hook reads Claude Code's.

    Hermes (0.19) writes no transcript file and names none: the session's messages are in
    `$HERMES_HOME/state.db` (default ~/.hermes; a profile sets HERMES_HOME for its hooks),
    so that database is the transcript, and the capture reads the session out of it
    (capture/hermes.py). Its `reason` ("shutdown", "session_boundary") is under `extra`.
    """
    env = os.environ if env is None else env
    home = str(env.get("HERMES_HOME") or "").strip() or os.path.expanduser("~/.hermes")
    extra = hook_input.get("extra")
    reason = extra.get("reason") if isinstance(extra, dict) else None
    return {**hook_input, "transcript_path": os.path.join(home, "state.db"),
            "reason": reason if isinstance(reason, str) else None}


def _exchanged(hook_input: dict[str, Any], session: str, fmt: str) -> bool:
    """Did the session's transcript hold an exchange? Hermes' state.db that cannot be read
    raises (a ValueError: the hook says why and spools nothing)."""
    path = hook_input.get("transcript_path")
    if fmt == "hermes":
        from mcp_bridge.capture import hermes

        return hermes.has_exchange(str(path), session)
    return transcript_has_exchange(path)


def session_end(cfg: Config, hook_input: dict[str, Any], *, outcome: str | None,
                summary: str | None, changed_paths: list[str] | None = None,
                fmt: str = "claude-code") -> str | None:
    """Spool a session.end event if the session did something; returns its id or None.

    "Did something": a transcript with at least one user/assistant exchange, a spooled
    write carrying this session id, or the caller saying so (--outcome/--summary/
    --changed-path). `claude mcp list` fires SessionEnd with none of these: no trace.
    ValueError says what is missing. `fmt` "hermes": the stdin is Hermes'
    on_session_finalize (hermes_end_input).
    """
    if fmt == "hermes":
        hook_input = hermes_end_input(hook_input)
    if cfg.problems:
        raise ValueError("; ".join(cfg.problems))
    explicit = cfg.session if cfg.session_source != "generated" else None
    session = (str(hook_input.get("session_id") or explicit or "").strip()[:128])
    if not session:
        raise ValueError("no session id (neither the hook's stdin JSON nor CTXLAKE_SESSION_ID)")
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"--outcome must be one of {', '.join(OUTCOMES)}")
    forget_session(cfg, session)
    reason = hook_input.get("reason")
    paths = list(dict.fromkeys(p.strip() for p in changed_paths or [] if p.strip()))
    if len(paths) > MAX_CHANGED_PATHS:
        raise ValueError(f"at most {MAX_CHANGED_PATHS} --changed-path values")
    said = outcome is not None or bool((summary or "").strip()) or bool(paths)
    if not (_exchanged(hook_input, session, fmt) or said or spooled_by(cfg, session)):
        return None
    transcript = _transcript(hook_input)
    if transcript and _capture_mode(cfg).reads_transcript:
        pid = start_capture(cfg, transcript, session, hook_input,
                            outcome=outcome, summary=summary, changed_paths=paths)
        if pid is not None:  # the capture process spools this session's one session.end
            return f"capture:{pid}"
    # only this fallback spools here: its imports (dataclasses → inspect) are ~20 ms
    from mcp_bridge.contract import redact
    from mcp_bridge.contract.spool import Spool

    payload: dict[str, Any] = {
        "outcome": outcome, "summary": (summary or "").strip()[:4000] or None,
        "reason": reason[:64] if isinstance(reason, str) and reason else None}
    if paths:  # absent when empty, so older drains read the line unchanged
        payload["changed_paths"] = paths
    spool = Spool(cfg.spool_dir, fleet=cfg.fleet, agent=cfg.agent, session=session,
                  max_bytes=cfg.spool_max_bytes, file_max_bytes=cfg.spool_file_max_bytes)
    return spool.append(contract.KIND_SESSION_END, redact.scrub_value(payload)).event_id


def _capture_mode(cfg: Config) -> Any:
    from mcp_bridge.capture import mode

    return mode.resolve(cfg, os.environ)


def _transcript(hook_input: dict[str, Any]) -> str | None:
    path = hook_input.get("transcript_path")
    if not isinstance(path, str) or not path:
        return None
    path = os.path.expanduser(path)
    return path if os.path.isfile(path) else None


def pre_compact(cfg: Config, hook_input: dict[str, Any]) -> int | None:
    """Claude Code is about to compact the conversation: capture its candidates so far.

    Only candidates (no session.end: the session goes on); the session's ledger keeps
    them, so its end proposes neither the same ones again nor more than the cap in all.
    Returns the capture process's pid, or None when there is nothing to do.
    """
    from mcp_bridge.config import clean_session

    session = clean_session(hook_input.get("session_id"))
    transcript = _transcript(hook_input)
    if cfg.problems or not session or not transcript or \
            not _capture_mode(cfg).reads_transcript:
        return None
    return start_capture(cfg, transcript, session, hook_input, outcome=None, summary=None,
                         changed_paths=[], phase="compact")


def start_capture(cfg: Config, transcript: str, session: str, hook_input: dict[str, Any], *,
                  outcome: str | None, summary: str | None,
                  changed_paths: list[str], phase: str = "end") -> int | None:
    """Start `python -m mcp_bridge capture-session` detached; its pid, or None if it failed.

    A new session (start_new_session) so the runtime's exit or Ctrl-C does not kill it;
    stdin from /dev/null, stdout/stderr appended to $CTXLAKE_HOME/logs/capture.log. The
    hook does not wait: Popen returns once the child is forked (a few ms).
    """
    import subprocess

    argv = [sys.executable, "-m", "mcp_bridge", "capture-session", "--transcript", transcript,
            "--session", session]
    cwd = hook_input.get("cwd")
    if isinstance(cwd, str) and cwd:
        argv += ["--cwd", cwd]
    reason = hook_input.get("reason")
    if isinstance(reason, str) and reason:
        argv += ["--reason", reason[:64]]
    if phase != "end":
        argv += ["--phase", phase]
    if outcome is not None:
        argv += ["--outcome", outcome]
    if summary and summary.strip():
        argv += ["--summary", summary.strip()[:4000]]
    for path in changed_paths:
        argv += ["--changed-path", path]
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parent.parent)  # the child imports this copy
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    env["CTXLAKE_SESSION_ID"] = session
    try:
        logs = cfg.home / "logs"
        logs.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(logs / "capture.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                     env=env, start_new_session=True, close_fds=True)
        finally:
            os.close(fd)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"ctxlake hook session-end: capture not started ({e}); recording "
                         "the session without it\n")
        return None
    return child.pid


def main(argv: list[str], *, command: str = "hook") -> int:
    """Never raises and always exits 0: a hook must not fail the host's turn."""
    try:
        return _main(argv)
    except SystemExit as e:  # argparse's own errors: say them, but still exit 0
        if e.code not in (0, None):
            sys.stderr.write("ctxlake hook: bad arguments (see --help); nothing done\n")
        return 0
    except Exception as e:  # noqa: BLE001 - the whole point: report, never propagate
        sys.stderr.write(f"ctxlake hook: {type(e).__name__}: {e}\n")
        return 0


# -- PreToolUse: tell the model about another agent's lease before it edits ------------------

EDIT_TOOLS = pretool.EDIT_TOOLS
#: What Claude Code runs the hook for, decided in its settings rather than inside the hook
#: (a spawn costs ~0.1-0.6 s before every Bash call): the edit tools by their matcher, and
#: Bash only for a command holding `git commit`, by a handler's `if` (permission-rule
#: syntax, Claude Code ≥ 2.1.89 matches each subcommand of a compound command): one rule
#: for `git commit…` (no space before the `*`: a bare `git commit` has none after it), one
#: for git options first (`git -C dir commit`; `-*`, not `*`, or a message saying "commit"
#: would match both and spawn two hooks). A rule that lets through a non-commit
#: (`git log --grep commit`) costs one spawn; the hook still reads the command itself.
EDIT_MATCHER = "|".join(EDIT_TOOLS)
COMMIT_RULES = ("Bash(git commit*)", "Bash(git -* commit*)")


def repo_root(start: Path) -> Path | None:
    """The enclosing git work tree (a `.git` dir or file), found without spawning git."""
    root = pretool.repo_root(str(start))
    return None if root is None else Path(root)


def target_paths(hook_input: dict[str, Any], env: Mapping[str, str] | None = None,
                 ) -> tuple[Path | None, list[str]]:
    """(repo root, repo-relative paths) the tool call is about to change; [] for none.
    `env`: the environment git runs in for a commit's paths (default: this process's)."""
    tool, args = hook_input.get("tool_name"), hook_input.get("tool_input")
    if not isinstance(args, dict):
        return None, []
    if tool in EDIT_TOOLS:
        found = pretool.edit_target(hook_input)
        return (Path(found[0]), [found[1]]) if found else (None, [])
    cwd = Path(pretool.call_cwd(hook_input))
    command = args.get("command")
    if tool == "Bash" and isinstance(command, str) and _is_git_commit(command):
        root = repo_root(cwd.resolve())
        return (root, _commit_paths(root, command, env)) if root else (None, [])
    return None, []


SEPARATORS = frozenset({"&&", "||", ";", "|", "(", ")", "&", ";;", "\n"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _is_git_commit(command: str) -> bool:
    """True when a shell command line runs `git [options] commit` as a command (not
    `echo git commit`): git at the start of a pipeline segment, commit its subcommand."""
    import shlex

    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return False
    for i, word in enumerate(words):
        k = i
        while k and _ASSIGNMENT.match(words[k - 1]):  # FOO=1 git commit
            k -= 1
        if word.rsplit("/", 1)[-1] != "git" or (k and words[k - 1] not in SEPARATORS):
            continue
        rest = words[i + 1:]
        j = 0
        while j < len(rest) and rest[j].startswith("-"):
            j += 2 if rest[j] in ("-C", "-c") else 1
        if j < len(rest) and rest[j] == "commit":
            return True
    return False


def _commit_paths(root: Path, command: str, env: Mapping[str, str] | None) -> list[str]:
    from mcp_bridge.guard import staged_paths

    paths = staged_paths(root, env=env)
    if " -a" in command or "--all" in command:  # commit -a also takes modified tracked files
        import subprocess

        done = subprocess.run(["git", "diff", "--name-only", "-z", "--no-renames"], cwd=root,
                              capture_output=True, timeout=5, env=env)
        paths += [q for q in done.stdout.decode("utf-8", "replace").split("\0") if q]
    return list(dict.fromkeys(paths))


def pre_tool_use(cfg: Config, hook_input: dict[str, Any], *, strict: bool,
                 call_id: str | None = None, env: Mapping[str, str] | None = None,
                 err: TextIO | None = None) -> str:
    """Claude Code PreToolUse JSON naming each lease the call would step on, or "".

    Warn (default): `additionalContext` for the model and a `systemMessage` for the user;
    the normal permission flow continues. `--strict`: `permissionDecision: deny` with the
    reason, which Claude Code shows to the model. A bridge answering the hook script's
    call (mcp_bridge.hook_door) passes the script's `env` (git runs in it), its `call_id`
    (the intrusions' event ids derive from it) and `err` (what the script writes to stderr).
    """
    from mcp_bridge import guard

    err = sys.stderr if err is None else err
    _root, paths = target_paths(hook_input, env)
    if not paths:
        return ""
    holds, note = guard.roster_holds(cfg)
    if holds is None:
        err.write(f"ctxlake hook pre-tool-use: not checking leases ({note})\n")
        return ""
    found = guard.conflicts(holds, paths)
    if not found:
        return ""
    lines = [f"{path} is leased by {h.holder} ({h.pattern}) until {h.expires_at}"
             + (f": {h.reason}" if h.reason else "") for path, h in found[:10]]
    more = f" (+{len(found) - 10} more)" if len(found) > 10 else ""
    advice = ("Blocked (ctxlake --strict): coordinate with the holder (fleet_handoff, or ask "
              "them to release) before changing it." if strict else
              "Leases are advisory: coordinate with the holder before changing it, or "
              "choose other files.")
    text = "ctxlake: " + "; ".join(lines) + more + ". " + advice
    specific: dict[str, Any] = {"hookEventName": "PreToolUse"}
    if strict:
        specific.update(permissionDecision="deny", permissionDecisionReason=text)
    else:  # the change goes ahead: each holder is owed an incident
        specific["additionalContext"] = text
        note_intrusions(cfg, hook_input, found, call_id=call_id, err=err)
    return json.dumps({"systemMessage": text, "hookSpecificOutput": specific},
                      ensure_ascii=False) + "\n"


def note_intrusions(cfg: Config, hook_input: dict[str, Any], found: list[tuple[str, Any]],
                    *, call_id: str | None = None, err: TextIO | None = None) -> None:
    """Spool one lease.intrusion per holder the warning named (the drain makes each an
    incident the holder is told about). Only on the warning path, so a free edit pays
    nothing; a spool that cannot take it costs the record, never the hook's answer.
    With a `call_id` each event's id is derived from it and the holder: the same hook
    call answered twice (bridge, then the script itself) is one incident."""
    from mcp_bridge.config import clean_session
    from mcp_bridge.contract import events as ev
    from mcp_bridge.contract.ids import derived_uuid
    from mcp_bridge.contract.spool import Spool

    err = sys.stderr if err is None else err
    tool = "commit" if hook_input.get("tool_name") == "Bash" else "edit"
    by_holder: dict[str, list[str]] = {}
    for path, hold in found:
        by_holder.setdefault(hold.holder, [])
        if path not in by_holder[hold.holder]:
            by_holder[hold.holder].append(path)
    session = clean_session(hook_input.get("session_id")) or cfg.session
    spool = Spool(cfg.spool_dir, fleet=cfg.fleet, agent=cfg.agent, session=session,
                  max_bytes=cfg.spool_max_bytes, file_max_bytes=cfg.spool_file_max_bytes)
    for holder, paths in by_holder.items():
        try:
            spool.append(ev.KIND_LEASE_INTRUSION, {
                "paths": paths[:ev.INTRUSION_PATHS_MAX], "holder": holder, "tool": tool},
                event_id=derived_uuid(call_id, holder) if call_id else None)
        except Exception as e:  # noqa: BLE001 - Refused, SpoolFull, OSError: warn anyway
            err.write(f"ctxlake hook pre-tool-use: intrusion not recorded: {e}\n")


#: The hooks as `install` writes them take no options (pre-tool-use at most --strict):
#: those skip argparse, whose import with gettext and shutil costs 10-25 ms.
BARE_EVENTS = ("session-start", "session-end", "pre-compact")


def _main(argv: list[str]) -> int:
    if argv[:1] == ["pre-tool-use"] and set(argv[1:]) <= {"--strict"}:  # the 50 ms path
        sys.stdout.write(pre_tool_use(Config.from_env(), read_hook_input(),
                                      strict="--strict" in argv))
        return 0
    if len(argv) == 1 and argv[0] in BARE_EVENTS:
        return _run(argv[0], fmt="claude-code", outcome=None, summary=None, changed_paths=None,
                    strict=False)
    import argparse

    p = argparse.ArgumentParser(prog="python -m mcp_bridge hook")
    p.add_argument("event", choices=("session-start", "session-end", "pre-compact",
                                     "pre-tool-use"))
    p.add_argument("--format", choices=("claude-code", "plain", "hermes"),
                   default="claude-code",
                   help="session-start output: Claude Code hook JSON (default), the text, or "
                        "Hermes' pre_llm_call JSON (first turn only); session-end input: "
                        "Claude Code's or Codex's (default) or Hermes' on_session_finalize")
    p.add_argument("--outcome", choices=OUTCOMES, default=None)
    p.add_argument("--summary", default=None)
    p.add_argument("--changed-path", action="append", dest="changed_paths", default=None,
                   help="session-end: a repo path this session changed (repeatable); claims "
                        "citing it at an older commit become possibly stale")
    p.add_argument("--strict", action="store_true",
                   help="pre-tool-use: deny (not just warn about) an edit in another's lease")
    a = p.parse_args(argv)
    return _run(a.event, fmt=a.format, outcome=a.outcome, summary=a.summary,
                changed_paths=a.changed_paths, strict=a.strict)


def _run(event: str, *, fmt: str, outcome: str | None, summary: str | None,
         changed_paths: list[str] | None, strict: bool) -> int:
    cfg, hook_input = Config.from_env(), read_hook_input()
    if event == "session-start":
        sys.stdout.write(session_start(cfg, hook_input, fmt=fmt))
        return 0
    if event == "pre-tool-use":
        sys.stdout.write(pre_tool_use(cfg, hook_input, strict=strict))
        return 0
    if event == "pre-compact":
        pre_compact(cfg, hook_input)
        return 0
    try:
        if session_end(cfg, hook_input, outcome=outcome, summary=summary,
                       changed_paths=changed_paths, fmt=fmt) is None:
            sys.stderr.write("ctxlake hook session-end: the session did nothing (no exchange "
                             "in its transcript, no spooled write); nothing recorded\n")
    except (ValueError, OSError) as e:
        sys.stderr.write(f"ctxlake hook session-end: nothing queued: {e}\n")
    return 0
