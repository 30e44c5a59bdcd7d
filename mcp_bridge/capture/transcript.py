"""Read a Claude Code or Codex transcript (JSONL) into one neutral list of steps.

(Hermes Agent writes no transcript file: `read` hands its state.db to capture/hermes.py.)

Stdlib only: this runs in the detached capture process a SessionEnd hook starts, never
in the hook itself. Both runtimes write one JSON object per line:

- Claude Code (`~/.claude/projects/<dir>/<session>.jsonl`): `{"type": "user"|"assistant"|
  "summary"|"system", "uuid", "parentUuid", "timestamp", "cwd", "gitBranch", "sessionId",
  "message": {"role", "content": str | [{"type": "text"|"tool_use"|"tool_result", ...}]}}`;
  a tool call is an assistant `tool_use` block (`id`, `name`, `input`), its result a user
  `tool_result` block (`tool_use_id`, `content`, `is_error`).
- Codex (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`): `{"timestamp", "type":
  "session_meta"|"response_item"|"turn_context"|"event_msg", "payload": {...}}`; a
  response_item payload is a `message` (role, content [{input_text|output_text}]), a
  `function_call` (name, arguments JSON, call_id), a `function_call_output` (call_id,
  output), a `custom_tool_call` (apply_patch's patch text as input) or a `local_shell_call`.

Every step keeps the id a citation can name: the Claude Code entry's `uuid`; for Codex
the item's `id`, else its `call_id`, else `line-<n>` (its 1-based line in the file, which
is stable: rollouts are append-only). Text is bounded as it is read (TEXT_KEEP), so a
5 MB transcript of tool output costs little memory.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

#: Bytes read at most; past it the rest of the transcript is skipped with a note.
MAX_TRANSCRIPT_BYTES = 64 << 20
#: A longer text keeps its head and tail (errors are usually at the end of tool output).
TEXT_KEEP = 4000
CLAUDE_KINDS = frozenset({"user", "assistant", "summary", "system"})
CODEX_KINDS = frozenset({"session_meta", "response_item", "turn_context", "event_msg",
                         "compacted"})


@dataclass
class Step:
    """One thing that happened: a message, a tool call, or a tool's result."""

    kind: str  # "user" | "assistant" | "call" | "result"
    id: str  # what a citation names (see the module docstring)
    at: str = ""  # ISO 8601 timestamp, as the transcript wrote it
    text: str = ""  # message text, a tool result's output, or what an edit call writes
    tool: str = ""  # call: the tool's name ("Bash", "Edit", "shell", "apply_patch")
    command: str = ""  # call: the shell command line, when the tool runs one
    paths: list[str] = field(default_factory=list)  # call: files it writes, as given
    call_id: str = ""  # call/result: pairs a result with its call
    failed: bool | None = None  # result: True/False when known


@dataclass
class Transcript:
    format: str  # "claude-code" | "codex" | "hermes" | "unknown"
    steps: list[Step] = field(default_factory=list)
    session_id: str = ""
    cwd: str = ""
    branch: str = ""
    repo_url: str = ""  # Codex's session_meta.git.repository_url
    started_at: str = ""
    ended_at: str = ""
    notes: list[str] = field(default_factory=list)  # what was skipped, and why


def arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as an object: OpenAI-style APIs (Codex, Hermes) send them
    as a JSON string; anything that is not an object reads as none."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def bounded(text: str, keep: int = TEXT_KEEP) -> str:
    if len(text) <= keep:
        return text
    half = keep // 2
    return text[:half] + "\n[…]\n" + text[-half:]


def read(path: str | Path, *, max_bytes: int = MAX_TRANSCRIPT_BYTES,
         session: str = "") -> Transcript:
    """Parse the transcript at `path`; never raises for bad content (notes say what).

    A sqlite file is Hermes' state.db, which holds every session: `session` picks one.
    """
    from mcp_bridge.capture import hermes

    out = hermes.read(path, session) if hermes.is_sqlite(path) else _jsonl(path, max_bytes)
    stamps = [s.at for s in out.steps if s.at]
    if stamps:
        out.started_at, out.ended_at = out.started_at or min(stamps), max(stamps)
    return out


def _jsonl(path: str | Path, max_bytes: int) -> Transcript:
    """A Claude Code or Codex transcript, whichever its first lines are."""
    entries: list[tuple[int, dict[str, Any]]] = []
    notes: list[str] = []
    bad = 0
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        data = data[:max_bytes]
        notes.append(f"transcript larger than {max_bytes} bytes: the rest was not read")
    lines = data.split(b"\n")
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            bad += 1
            if n == len(lines):
                notes.append(f"line {n} is truncated (a writer still appending?): skipped")
            continue
        if isinstance(entry, dict):
            entries.append((n, entry))
    if bad and not (bad == 1 and notes and "truncated" in notes[-1]):
        notes.append(f"{bad} line(s) were not JSON: skipped")
    fmt = detect(entries)
    if fmt == "claude-code":
        out = _claude(entries)
    elif fmt == "codex":
        out = _codex(entries)
    else:
        out = Transcript("unknown")
        notes.append("unknown transcript format (neither Claude Code's nor Codex's JSONL): "
                     "nothing extracted")
    out.notes = notes + out.notes
    return out


def detect(entries: list[tuple[int, dict[str, Any]]]) -> str:
    """The format the first recognisable lines are in (up to 50 looked at)."""
    for _, e in entries[:50]:
        kind = e.get("type")
        if kind in CODEX_KINDS and isinstance(e.get("payload"), dict):
            return "codex"
        if kind in CLAUDE_KINDS and ("uuid" in e or "leafUuid" in e) and (
                kind == "summary" or isinstance(e.get("message"), dict)):
            return "claude-code"
    return "unknown"


# -- Claude Code -------------------------------------------------------------------------

EDIT_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path"}
_EXIT_CODE = re.compile(r"^(?:Exit code:?|Process exited with code)\s*(-?\d+)", re.M)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content
                         if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _claude(entries: list[tuple[int, dict[str, Any]]]) -> Transcript:
    t = Transcript("claude-code")
    for _, e in entries:
        kind, msg = e.get("type"), e.get("message")
        if kind not in ("user", "assistant") or not isinstance(msg, dict) or e.get("isMeta"):
            continue
        uid, at = str(e.get("uuid") or ""), str(e.get("timestamp") or "")
        if not uid:
            continue
        t.session_id = t.session_id or str(e.get("sessionId") or "")
        t.cwd = t.cwd or str(e.get("cwd") or "")
        if e.get("gitBranch") and e["gitBranch"] != "HEAD":  # "HEAD": no branch / no repo
            t.branch = str(e["gitBranch"])
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        texts: list[str] = []
        for b in blocks:
            if not isinstance(b, dict):
                continue
            if b.get("type") == "text" and isinstance(b.get("text"), str):
                texts.append(b["text"])
            elif b.get("type") == "tool_use" and kind == "assistant":
                t.steps.append(_claude_call(b, uid, at))
            elif b.get("type") == "tool_result":
                out = bounded(_text_of(b.get("content")))
                failed = bool(b.get("is_error"))
                code = _EXIT_CODE.search(out[:200])
                if code:
                    failed = failed or code.group(1) != "0"
                t.steps.append(Step("result", uid, at, out, call_id=str(b.get("tool_use_id")
                                                                        or ""), failed=failed))
        text = "\n".join(texts).strip()
        if text and not (kind == "user" and is_harness_text(text)):
            t.steps.append(Step(kind, uid, at, bounded(text)))
    pair(t.steps)
    return t


def is_harness_text(text: str) -> bool:
    """Text the runtime injected in the user's turn (slash-command echoes, reminders)."""
    return text.startswith(("<command-", "<local-command", "Caveat:", "<system-reminder>",
                            "<user_instructions>", "<environment_context>",
                            "[Request interrupted"))


def _claude_call(b: dict[str, Any], uid: str, at: str) -> Step:
    name, args = str(b.get("name") or ""), b.get("input")
    args = args if isinstance(args, dict) else {}
    step = Step("call", uid, at, tool=name, call_id=str(b.get("id") or ""))
    if name in EDIT_TOOLS and isinstance(args.get(EDIT_TOOLS[name]), str):
        step.paths = [args[EDIT_TOOLS[name]]]
        step.text = bounded(written(args))
    elif isinstance(args.get("command"), str):
        step.command = args["command"][:2000]
    return step


def written(args: dict[str, Any]) -> str:
    """What an edit call writes, so evidence can quote the change itself: the lines of
    each new string that its old string did not have (a Write: its content)."""
    many = args.get("edits")
    edits: list[Any] = many if isinstance(many, list) else [args]
    lines: list[str] = []
    for e in edits:
        if not isinstance(e, dict):
            continue
        new: str = next((e[k] for k in ("new_string", "content", "new_source")
                         if isinstance(e.get(k), str)), "")
        old: str = e["old_string"] if isinstance(e.get("old_string"), str) else ""
        had = set(old.splitlines())
        lines += [ln for ln in new.splitlines() if ln not in had]
    return "\n".join(lines)


def pair(steps: list[Step]) -> None:
    """Give each result its call's tool and command (results carry only the call id)."""
    calls = {s.call_id: s for s in steps if s.kind == "call" and s.call_id}
    for s in steps:
        if s.kind == "result" and s.call_id in calls:
            s.tool, s.command = calls[s.call_id].tool, calls[s.call_id].command


# -- Codex -------------------------------------------------------------------------------

_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$",
                         re.M)


def patch_paths(patch: str) -> list[str]:
    """The files an apply_patch envelope touches (`*** Update File: src/a.py`)."""
    return [(a or b).strip() for a, b in _PATCH_FILE.findall(patch)]


def _codex(entries: list[tuple[int, dict[str, Any]]]) -> Transcript:
    t = Transcript("codex")
    for n, e in entries:
        kind, p, at = e.get("type"), e.get("payload"), str(e.get("timestamp") or "")
        if not isinstance(p, dict):
            continue
        if kind == "session_meta":
            t.session_id = str(p.get("id") or t.session_id)
            t.cwd = str(p.get("cwd") or t.cwd)
            t.started_at = str(p.get("timestamp") or "")
            git = cast("dict[str, Any]", p.get("git")) if isinstance(p.get("git"), dict) else {}
            t.branch = str(git.get("branch") or t.branch)
            t.repo_url = str(git.get("repository_url") or "")
        elif kind == "turn_context" and p.get("cwd"):
            t.cwd = t.cwd or str(p["cwd"])
        elif kind == "response_item":
            step = _codex_item(p, n, at)
            if step is not None:
                t.steps.append(step)
    pair(t.steps)
    return t


def _codex_item(p: dict[str, Any], n: int, at: str) -> Step | None:
    kind = p.get("type")
    sid = str(p.get("id") or p.get("call_id") or f"line-{n}")
    if kind == "message" and p.get("role") in ("user", "assistant"):
        text = _text_of(p.get("content")).strip()
        if not text or is_harness_text(text):
            return None
        return Step(str(p["role"]), sid, at, bounded(text))
    if kind in ("function_call", "custom_tool_call", "local_shell_call"):
        name = str(p.get("name") or ("shell" if kind == "local_shell_call" else ""))
        step = Step("call", sid, at, tool=name, call_id=str(p.get("call_id") or ""))
        if kind == "custom_tool_call":
            raw = p.get("input")
            if name == "apply_patch" and isinstance(raw, str):
                step.paths, step.text = patch_paths(raw), bounded(raw)
            return step
        args = arguments(p.get("action") if kind == "local_shell_call" else p.get("arguments"))
        cmd = args.get("command", args.get("cmd"))
        argv = cmd if isinstance(cmd, list) else None
        if argv and argv[:1] == ["apply_patch"] and len(argv) > 1:
            step.tool, step.paths = "apply_patch", patch_paths(str(argv[1]))
            step.text = bounded(str(argv[1]))
        elif argv:
            words = [str(w) for w in argv]
            line = words[2] if words[:2] in (["bash", "-lc"], ["bash", "-c"], ["sh", "-c"]) \
                and len(words) > 2 else " ".join(words)
            if line.startswith("apply_patch") and "*** Begin Patch" in line:
                step.tool, step.paths, step.text = "apply_patch", patch_paths(line), bounded(line)
            else:
                step.command = line[:2000]
        elif isinstance(cmd, str):
            step.command = cmd[:2000]
        return step
    if kind in ("function_call_output", "custom_tool_call_output"):
        return _codex_output(p, sid, at)
    return None


def _codex_output(p: dict[str, Any], sid: str, at: str) -> Step:
    raw = p.get("output")
    failed: bool | None = None
    text = raw if isinstance(raw, str) else json.dumps(raw)[:TEXT_KEEP] if raw else ""
    if isinstance(raw, str) and raw.startswith("{"):
        try:
            decoded = json.loads(raw)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):  # {"output": "...", "metadata": {"exit_code": 1}}
            meta = (
                cast("dict[str, Any]", decoded.get("metadata"))
                if isinstance(decoded.get("metadata"), dict)
                else {}
            )
            if isinstance(meta.get("exit_code"), int):
                failed = meta["exit_code"] != 0
            text = str(decoded.get("output") or "")
    if failed is None:
        code = _EXIT_CODE.search(text[:200])
        if code:
            failed = code.group(1) != "0"
    if isinstance(p.get("success"), bool):
        failed = not p["success"]
    return Step("result", sid, at, bounded(text), call_id=str(p.get("call_id") or ""),
                failed=failed)
