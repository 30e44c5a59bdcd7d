"""Candidate claims from a transcript, by three deterministic extractors.

Each candidate is only ever *proposed* (a `claim.proposed` event: a person promotes it)
and cites the transcript's own message ids. Extractors and their scores (best first;
the session's cap keeps the top MAX_CANDIDATES):

- error_fix (score 3 + 0.5 per edited file, at most 4.5): a command failed, files were
  edited, and the same command then passed; the claim quotes the first sentence the
  assistant said between the failure and the pass (else right after the pass); the error
  line is cited as an excerpt, never put in the text. Type gotcha; subject: the first
  edited path.
- lesson (user 2.5, assistant 2.0): a sentence with an explicit marker ("the fix was",
  "turns out", "we decided", "gotcha", "always run", a sentence starting "Don't"/"Never";
  not "don't worry/hesitate", not "never mind").
  Type decision / procedure / gotcha / fact by marker; subject: a path named in the
  sentence, else a `code` span, else the tool involved.
- works_here (2.0): a build/test/lint command that passed after a *different* invocation
  of the same program failed in the session, i.e. the flags or environment had to be
  discovered (a plain passing run proposes nothing). Type procedure; subject: the program.

- llm (2.5; mcp_bridge.capture.llm, only when the fleet's capture is "candidates+llm"):
  what the model proposed, cited by transcript message ids that exist.

A candidate whose text copies a tool's output (a sentence of COPY_MIN_CHARS or more found
in any tool result) is dropped: a claim's text is the agent's or the user's words, and tool
output appears only in excerpts. Near-identical candidates (word-set Jaccard >=
MERGE_JACCARD) merge: the higher score stays, citations are pooled. Ties keep transcript
order. The capture (run.py) then holds back any candidate the instruction screen flags.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_bridge.capture.record import check_kind
from mcp_bridge.capture.transcript import Step
from mcp_bridge.contract import events as ev

MAX_CANDIDATES = 5
MERGE_JACCARD = 0.8
EXCERPT_CHARS = 240
LESSON_MAX_CHARS = 400


@dataclass
class Candidate:
    extractor: str
    claim: str
    type: str
    subject: str
    score: float
    cites: list[tuple[str, str]] = field(default_factory=list)  # (message id, excerpt)
    order: int = 0

    def payload(self, session_id: str, repo: str = "") -> dict[str, Any]:
        """The claim.proposed payload (unscrubbed: the caller scrubs before spooling)."""
        evidence = []
        for mid, excerpt in list(dict.fromkeys(self.cites))[:ev.CITATIONS_MAX]:
            cite = {"session_id": session_id, "message_id": mid,
                    "excerpt": excerpt[:ev.EXCERPT_MAX_CHARS]}
            if repo:
                cite["repo"] = repo[:ev.REPO_MAX_CHARS]
            evidence.append(cite)
        assert self.extractor in ev.CAPTURE_EXTRACTORS
        return {"claim": self.claim[:ev.CLAIM_MAX_CHARS], "type": self.type,
                "subject": self.subject[:ev.SUBJECT_MAX_CHARS] or "session", "scope": "agent",
                "evidence": evidence, "extractor": self.extractor}


def candidates(steps: list[Step], *, cap: int = MAX_CANDIDATES,
               relative: Callable[[str], str] = str,
               more: list[Candidate] | None = None) -> list[Candidate]:
    """The session's best `cap` candidates, merged, best first.

    `relative` turns a path a tool named into the repo-relative one a claim should name;
    `more` are candidates found another way (the optional LLM step), ranked, merged and
    capped with these by the same rule.
    """
    found = error_fix(steps, relative) + lessons(steps) + works_here(steps) + (more or [])
    copied = _tool_output(steps)
    found = [c for c in found if not copies_tool_output(c.claim, copied)]
    for i, c in enumerate(found):
        c.order = i
    merged: list[Candidate] = []
    for c in sorted(found, key=lambda c: (-c.score, c.order)):
        twin = next((m for m in merged if _similar(m.claim, c.claim) or c.claim in m.claim),
                    None)
        if twin is None:
            merged.append(c)
        else:
            twin.cites.extend(x for x in c.cites if x not in twin.cites)
    return merged[:cap]


#: A sentence this long that also stands in a tool's output is that output, not a lesson.
COPY_MIN_CHARS = 30


def _tool_output(steps: list[Step]) -> str:
    """Every tool result of the session, normalised as copies_tool_output compares."""
    return "\n".join(_norm(s.text) for s in steps if s.kind == "result" and s.text)


def copies_tool_output(claim: str, output: str) -> bool:
    """Whether a sentence of `claim` is a copy of what a tool printed or read.

    Tool output is what files and commands say — a test fixture, an ops doc, a web page —
    which anyone may have written, an injected instruction included. An agent that repeats
    it (as a model quoting a file does) has not learned it: such a candidate is dropped,
    and the output can still be quoted as an excerpt of a candidate that states a lesson.
    """
    if not output:
        return False
    for sentence in re.split(r"(?<=[.!?:;])\s+", claim):
        text = _norm(sentence).strip(" .!?:;")
        if len(text) >= COPY_MIN_CHARS and text in output:
            return True
    return False


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9_./-]+", text.lower()))


def _similar(a: str, b: str) -> bool:
    wa, wb = _words(a), _words(b)
    return bool(wa and wb) and len(wa & wb) / len(wa | wb) >= MERGE_JACCARD


def _excerpt(text: str) -> str:
    return " ".join(text.split())[:EXCERPT_CHARS]


def _key(command: str) -> str:
    return " ".join(command.split())


def _first_error_line(text: str) -> str:
    """The line that names the error, most specific first: an ...Error/...Exception line, a
    file:line: diagnostic, a line saying "error", a line saying it failed; else the last."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for pattern in (r"\b\w*(?:Error|Exception)\b", r"^\S+:\d+(?::\d+)?:", r"(?i)\berror\b",
                    r"(?i)fail|not found|cannot"):
        for ln in lines:
            if re.search(pattern, ln) and not ln.startswith("Exit code"):
                return ln[:160]
    return (lines[-1] if lines else "")[:160]


def _program(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if not re.match(r"[A-Za-z_][A-Za-z0-9_]*=", w)]
    if words[:2] in (["python", "-m"], ["python3", "-m"], ["uv", "run"], ["poetry", "run"]):
        words = words[2:]
    return words[0].rsplit("/", 1)[-1] if words else ""


def error_fix(steps: list[Step], relative: Callable[[str], str] = str) -> list[Candidate]:
    out: list[Candidate] = []
    failing: dict[str, int] = {}  # command key → index of its first unresolved failure
    for i, s in enumerate(steps):
        if s.kind != "result" or not s.command or s.failed is None:
            continue
        key = _key(s.command)
        if s.failed:
            failing.setdefault(key, i)
            continue
        start = failing.pop(key, None)
        if start is None:
            continue
        edits = [e for e in steps[start:i] if e.kind == "call" and e.paths]
        if not edits:
            continue  # passed on a retry with no edit: flaky, not a fix
        paths = list(dict.fromkeys(relative(p) for e in edits for p in e.paths))
        fail = steps[start]
        why = next((x.text for x in reversed(steps[start:i]) if x.kind == "assistant"), "") \
            or _said_next(steps, i)
        # The failure's output is quoted in the excerpt, never in the text: tool output is
        # anyone's words (a fixture, a log), and the claim's text is the lesson.
        claim = (f"`{key[:200]}` failed and passed after changing "
                 f"{', '.join(_short(p) for p in paths[:5])}")
        if why:
            claim += f": {_sentence(why)}"
        cites = [(fail.id, _first_error_line(fail.text) or key[:EXCERPT_CHARS])]
        cites += [(e.id, f"{e.tool} {', '.join(relative(p) for p in e.paths)}")
                  for e in edits[:10]]
        cites.append((s.id, f"passed: {key[:200]}"))
        out.append(Candidate("error_fix", claim, "gotcha", _short(paths[0]),
                             min(4.5, 3.0 + 0.5 * len(paths)), cites))
    return out


def _said_next(steps: list[Step], i: int) -> str:
    """The assistant's first words after step i, if it speaks before its next tool call."""
    for x in steps[i + 1:]:
        if x.kind == "assistant":
            return x.text
        if x.kind in ("call", "user"):
            return ""
    return ""


def _short(path: str) -> str:
    """A path as a claim names it: repo-relative when it can tell, else the last 3 parts."""
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-3:]) if path.startswith("/") else path


def _sentence(text: str) -> str:
    first = re.split(r"(?<=[.!?])\s+", " ".join(text.split()), maxsplit=1)[0]
    return first[:300]


_LESSONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("decision", re.compile(r"(?i)\b(we decided|decided to|we(?:'ll| will) go with|"
                            r"the decision is)\b")),
    ("procedure", re.compile(r"(?i)\b(always run|remember to run|you (?:must|need to) run|"
                             r"make sure to run)\b")),
    ("gotcha", re.compile(r"(?i)\b(turns out|gotcha|the catch is|watch out|beware)\b"
                          r"|^(?:don'?t|do not|never)\b")),
    ("fact", re.compile(r"(?i)\b(the fix was|the (?:root )?cause was|the problem was|"
                        r"the issue was)\b")),
)
#: Politeness and dismissals that start like a warning but teach nothing.
_NOT_A_LESSON = re.compile(r"(?i)^(?:don'?t|do not|never)\s+(?:worry|hesitate|mind)\b"
                           r"|\bnever ?mind\b")
_PATHISH = re.compile(r"(?<![\w/])((?:[\w.-]+/)+[\w.-]+\.\w+|[\w-]+\.(?:py|js|ts|tsx|rs|go|toml|"
                      r"json|ya?ml|md|cfg|ini|sh|sql|html|css))\b")
_CODE = re.compile(r"`([^`\n]{2,60})`")


def lessons(steps: list[Step]) -> list[Candidate]:
    out: list[Candidate] = []
    tool = ""
    for s in steps:
        if s.kind == "call":
            tool = s.tool
        if s.kind not in ("user", "assistant"):
            continue
        for sentence in _sentences(s.text):
            if _NOT_A_LESSON.search(sentence):
                continue
            for claim_type, pattern in _LESSONS:
                if pattern.search(sentence):
                    subject = (_first(_PATHISH, sentence) or _first(_CODE, sentence)
                               or tool or "session")
                    out.append(Candidate("lesson", sentence[:LESSON_MAX_CHARS], claim_type,
                                         subject, 2.5 if s.kind == "user" else 2.0,
                                         [(s.id, _excerpt(sentence))]))
                    break
    return out


def _first(pattern: re.Pattern[str], text: str) -> str:
    m = pattern.search(text)
    return m.group(1) if m else ""


def _sentences(text: str) -> list[str]:
    """Sentences of prose: code blocks dropped, list markers stripped, 20-400 chars."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    out = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*>]|\d+[.)])\s+", "", line).strip()
        for part in re.split(r"(?<=[.!?])\s+(?=[A-Z`\"'])", line):
            part = part.strip()
            if 20 <= len(part) <= LESSON_MAX_CHARS:
                out.append(part)
    return out


def works_here(steps: list[Step]) -> list[Candidate]:
    out: dict[str, Candidate] = {}
    failed: dict[str, set[str]] = {}  # program → the command lines of it that failed
    for s in steps:
        if s.kind != "result" or not s.command or s.failed is None:
            continue
        kind = check_kind(s.command)
        if not kind:
            continue
        program = _program(s.command)
        key = _key(s.command)
        if s.failed:
            failed.setdefault(program, set()).add(key)
            continue
        if key in out or "\n" in s.command or len(key) > 300:
            continue
        tried = sorted(failed.get(program, set()) - {key})  # other variants that failed
        if not tried:
            continue  # nothing was discovered: a plain `pytest` teaches the fleet nothing
        claim = (f"`{key}` runs the {kind} here; `{tried[0][:200]}` failed earlier in the same "
                 "session (the flags/environment matter)")
        cites = [(s.id, f"passed: {key[:200]}")]
        out[key] = Candidate("works_here", claim, "procedure", program or kind, 2.0, cites)
    return list(out.values())
