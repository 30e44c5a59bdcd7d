"""Candidate claims from a transcript, by three deterministic extractors.

Each candidate is only ever *proposed* (a `claim.proposed` event: a person promotes it)
and cites the transcript's own message ids, each with a verbatim quote of that entry. What
is worth a moderator's time is what stays true after the session and the code does not
show: conventions, environment and configuration gotchas, pitfalls, decisions. A bug the
session fixed in the source is in the diff already; it is not proposed.

- lesson (user 2.5, assistant 2.0): a sentence that states a lesson — a marker ("turns
  out", "gotcha", "heads up", "FYI", "note for next time", "we decided", "always run",
  "in this repo we …", a sentence starting "Don't"/"Never") — *and* names something of
  the project (a path, a `code` span, a SETTING, a call(); "Don't forget to rebase" names
  nothing and is dropped). Type decision / procedure / gotcha by marker; subject: the path,
  code span or setting it names.
- error_fix (3.0): a command failed and then passed after a change that teaches something
  the code will not show — a configuration, environment or build file edited (`.env`,
  settings, Makefile, requirements, CI), or another command run first (`make services`).
  An edit to ordinary source, or to docs (never the cause of a failing command), is not
  one; nor is a pass the agent itself calls unrelated, flaky or a coincidence. When a
  lesson sentence of the session names the same file or command, the fix only adds its
  evidence (the error line, the change, the passing line) to that lesson. Type gotcha.
- works_here (2.0): a build/test/lint command that passed after a *different* invocation
  of the same program failed, i.e. its flags or environment had to be discovered; dropped
  when the plain invocation passes later in the session (the environment was fixed
  instead). Type procedure; subject: the program.

- llm (2.5; mcp_bridge.capture.llm, only when the fleet's capture is "candidates+llm"):
  what the model proposed, cited by transcript message ids that exist.

A candidate whose text copies a tool's output (a sentence of COPY_MIN_CHARS or more found
in any tool result) is dropped: a claim's text is the agent's or the user's words, and tool
output appears only in excerpts. Near-identical candidates (word-set Jaccard >=
MERGE_JACCARD) merge: the higher score stays, citations are pooled. Ties keep transcript
order; at most MAX_CANDIDATES a session. The capture (run.py) then holds back any candidate
the instruction screen flags.
"""

from __future__ import annotations

import bisect
import itertools
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_bridge import contract
from mcp_bridge.capture.record import check_kind
from mcp_bridge.capture.transcript import Step
from mcp_bridge.contract import events as ev
from mcp_bridge.contract import render

MAX_CANDIDATES = contract.CAPTURE_MAX_DEFAULT  # the fleet may set another (capture.mode)
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
    anchors: list[str] = field(default_factory=list)  # error_fix: the files/command it needed
    reason: str = ""  # error_fix: the agent's sentence saying why

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
                "subject": (self.subject or _repo_name(repo))[:ev.SUBJECT_MAX_CHARS],
                "scope": "agent",
                "evidence": evidence, "extractor": self.extractor}


def _repo_name(repo: str) -> str:
    """The subject of a decision that names nothing narrower: the repository itself, by
    its name (the contract's rule, last part: "shop" for acme/shop)."""
    return render.repo_name(repo).rsplit("/", 1)[-1] or "repository"


def candidates(steps: list[Step], *, cap: int = MAX_CANDIDATES,
               relative: Callable[[str], str] = str,
               more: list[Candidate] | None = None) -> list[Candidate]:
    """The session's best `cap` candidates, merged, best first.

    `relative` turns a path a tool named into the repo-relative one a claim should name;
    `more` are candidates found another way (the optional LLM step), ranked, merged and
    capped with these by the same rule.
    """
    said = lessons(steps)
    found = said + _fold(error_fix(steps, relative), said) + works_here(steps) + (more or [])
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
    """A verbatim, bounded quote (evidence is what the entry says, not a retelling)."""
    return text.strip()[:EXCERPT_CHARS]


def _key(command: str) -> str:
    return " ".join(command.split())


def error_line(text: str) -> str:
    """The line of a failure's output that names the error, verbatim: pytest's `E   …`
    exception line, else a traceback's last `XxxError: message`, else a file:line:
    diagnostic, a line saying error, a line saying it failed; never a source line pytest
    echoes (`>   raise …`) or a location header (`test_x.py:5: AssertionError`)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith(("Exit code", ">", "raise "))]
    for pattern in (r"^E\s+\S*(?:Error|Exception|Exit|Interrupt)\b.*", r"^E\s+\S.*",
                    r"^[\w.]*(?:Error|Exception)(?::\s.*)?$",
                    r"^(?!\S+:\d+: \w+$)\S+:\d+(?::\d+)?:\s.*", r"(?i)\berror\b",
                    r"(?i)fail|not found|cannot"):
        for ln in lines:
            if re.search(pattern, ln):
                return ln[:EXCERPT_CHARS]
    return (lines[-1] if lines else "")[:EXCERPT_CHARS]


def last_line(text: str) -> str:
    """A passing command's last line of output, verbatim ("2 passed in 0.10s")."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:EXCERPT_CHARS]


def _program(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if not re.match(r"[A-Za-z_][A-Za-z0-9_]*=", w)]
    if words[:2] in (["python", "-m"], ["python3", "-m"], ["uv", "run"], ["poetry", "run"]):
        words = words[2:]
    return words[0].rsplit("/", 1)[-1] if words else ""


#: Files whose change teaches what the code will not show: configuration, environment,
#: dependencies, build and CI. (Ordinary source is in the diff; docs never make a failing
#: command pass.)
_SETUP = re.compile(
    r"(?i)(?:^|/)(?:\.env[\w.-]*|[\w.-]*\.(?:env|toml|cfg|ini|ya?ml|conf|lock)|settings[\w.-]*"
    r"|conftest\.py|Makefile|Dockerfile|Procfile|requirements[\w.-]*\.txt|package\.json"
    r"|[\w.-]*(?:config|settings|logging|schema)[\w.-]*\.json"
    r"|\.?[\w-]*rc(?:\.\w+)?|\.github/.*|\.gitlab-ci.*|noxfile\.py|tox\.ini|justfile)$")
_DOCS = re.compile(r"(?i)(?:^|/)(?:docs?/.*|[\w.-]+\.(?:md|rst|adoc)"
                   r"|(?!requirements)[\w.-]+\.txt)$")
#: Commands that look and change nothing: not "another command run first".
_READ_ONLY = re.compile(r"^(?:ls|cat|head|tail|less|more|grep|rg|find|fd|tree|pwd|which|echo|"
                        r"wc|stat|file|env|printenv|true|sed -n|git (?:status|log|diff|show|"
                        r"branch|remote)|cd)\b")
#: The agent's own verdict that a pass was not caused by what it changed.
_NOT_THE_CAUSE = re.compile(r"(?i)\b(?:unrelated|flak(?:y|e)|not the cause|coincidence|"
                            r"transient|intermittent|on a retry|rerun passed|re-run passed)\b")


def is_setup_path(path: str) -> bool:
    return bool(_SETUP.search(path)) and not _DOCS.search(path)


def error_fix(steps: list[Step], relative: Callable[[str], str] = str) -> list[Candidate]:
    """Fixes that teach (see the module docstring): each names what it needed in `anchors`
    (the setup files changed, or the command run first) for `_fold`."""
    out: list[Candidate] = []
    failing: dict[str, int] = {}  # command key → index of its first unresolved failure
    setup_at = [i for i, e in enumerate(steps)  # where configuration files were edited
                if e.kind == "call" and any(is_setup_path(relative(p)) for p in e.paths)]
    for i, s in enumerate(steps):
        if s.kind != "result" or not s.command or s.failed is None:
            continue
        key = _key(s.command)
        if s.failed:
            failing.setdefault(key, i)
            continue
        if key not in failing:  # another check of the same kind passing after a setup
            key = _same_kind_failing(failing, s.command, i, setup_at) or key  # change counts
        start = failing.pop(key, None)
        if start is None or _NOT_THE_CAUSE.search(_said_after(steps, i)):
            continue
        fix = _fix_between(steps, start, i, key, relative)
        if fix is not None:
            out.append(fix)
    return out


def _same_kind_failing(failing: dict[str, int], command: str, end: int,
                       setup_at: list[int]) -> str | None:
    """The failing check (same kind: test, build or lint) that `command`, passing at step
    `end`, resolves when a configuration file changed between them (`make test` after
    ci.env gained a setting the failing `python -m unittest` lacked). `setup_at`: the
    sorted steps where configuration files were edited."""
    kind = check_kind(command)
    if not kind:
        return None
    for key, start in sorted(failing.items(), key=lambda kv: -kv[1]):
        edited = bisect.bisect_right(setup_at, start)
        if check_kind(key) == kind and edited < len(setup_at) and setup_at[edited] < end:
            return key
    return None


def _fix_between(steps: list[Step], start: int, end: int, key: str,
                 relative: Callable[[str], str]) -> Candidate | None:
    between = steps[start + 1:end]
    edits = [e for e in between if e.kind == "call" and e.paths]
    setup = [e for e in edits if any(is_setup_path(relative(p)) for p in e.paths)]
    fail, passed = steps[start], steps[end]
    cites = [(fail.id, error_line(fail.text) or key[:EXCERPT_CHARS])]
    if setup:
        paths = list(dict.fromkeys(relative(p) for e in setup for p in e.paths
                                   if is_setup_path(relative(p))))
        cites += [(e.id, quoted) for e in setup[:5] if (quoted := _quote(e.text))]
        anchors, needs = paths, ", ".join(_short(p) for p in paths[:3])
        subject = _short(paths[0])
    elif not any(_DOCS.search(relative(p)) for e in edits for p in e.paths) and (
            first := _command_run_first(between, key)) is not None:
        cites.append((first.id, last_line(first.text) or _key(first.command)[:EXCERPT_CHARS]))
        anchors, needs = [_key(first.command)], f"`{_key(first.command)[:120]}` run first"
        subject = _program(first.command)
    else:
        return None  # a source fix alone (the diff shows it), a docs edit, or a bare retry
    cites.append((passed.id, last_line(passed.text) or key[:EXCERPT_CHARS]))
    after = list(itertools.takewhile(lambda x: x.kind not in ("user", "call"), steps[end + 1:]))
    why = _naming(after, anchors) or _naming(between, anchors)
    if setup and not why:
        return None  # "needs .env", and no word why: nothing when unsure
    claim = f"`{key[:200]}` needs {needs}" + (f": {why}" if why else "")
    return Candidate("error_fix", claim, "gotcha", subject, 3.0, cites, anchors=anchors,
                     reason=why)


def _command_run_first(between: list[Step], key: str) -> Step | None:
    """The last state-changing command that succeeded between a failure and its pass
    (not a variant of the failing program: that is works_here's)."""
    program = _program(key)
    for x in reversed(between):
        if x.kind == "result" and x.command and x.failed is False \
                and not _READ_ONLY.match(_key(x.command)) and _program(x.command) != program:
            return x
    return None


#: A sentence that retells what the session changed ("Fixed app.ini: the password is now
#: …", "Pinned slugkit …"): the diff's news, not the reason a later agent needs.
_RETELLS = re.compile(r"(?i)^(?:fixed|done|added|changed|updated|removed|pinned|replaced|"
                      r"renamed|moved|bumped|reverted|i(?:'ve| have)? \w+ed)\b|\bis now\b")


def _naming(steps: list[Step], anchors: list[str]) -> str:
    """The agent's reason in `steps` (right after the pass, or between failure and pass;
    up to the user's next word): its first sentence naming one of `anchors`, else its first
    that names anything of the project; never one that only retells the change."""
    said = [sentence for x in _until_user(steps) if x.kind == "assistant"
            for sentence in _sentences(x.text) if not _RETELLS.search(sentence)]
    for sentence in said:
        if any(_names(sentence, a) for a in anchors):
            return sentence[:300]
    return next((sentence[:300] for sentence in said if anchor(sentence)), "")


def _until_user(steps: list[Step]) -> list[Step]:
    return list(itertools.takewhile(lambda x: x.kind != "user", steps))


def _names(sentence: str, anchor: str) -> bool:
    anchor = anchor.strip()
    return bool(anchor) and (anchor in sentence or _short(anchor).rsplit("/", 1)[-1] in sentence)


def _said_after(steps: list[Step], i: int) -> str:
    """What the assistant said after step i, before the user speaks again."""
    return " ".join(x.text for x in _until_user(steps[i + 1:]) if x.kind == "assistant")


def _quote(text: str) -> str:
    """A bounded verbatim piece of what an edit wrote: its first non-blank line."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")[:EXCERPT_CHARS]


def _fold(fixes: list[Candidate], said: list[Candidate]) -> list[Candidate]:
    """Fixes a lesson of the session already states (it names the fix's file or command,
    or quotes its reason) add their evidence to that lesson instead of standing twice."""
    standing = []
    for fix in fixes:
        home = next((c for c in said
                     if any(_names(c.claim, a) for a in fix.anchors)
                     or (fix.reason and fix.reason in c.claim)), None)
        if home is None:
            standing.append(fix)
        else:
            home.cites.extend(x for x in fix.cites if x not in home.cites)
    return standing


def _short(path: str) -> str:
    """A path as a claim names it: repo-relative when it can tell, else the last 3 parts."""
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-3:]) if path.startswith("/") else path


def _sentence(text: str) -> str:
    first = re.split(r"(?<=[.!?])\s+", " ".join(text.split()), maxsplit=1)[0]
    return first[:300]


_LESSONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("decision", re.compile(r"(?i)\b(we decided|decided to|we(?:'ll| will) go with|"
                            r"the decision is|our convention|the convention (?:here )?is|"
                            r"we agreed|let'?s settle|from now on)\b")),
    ("procedure", re.compile(r"(?i)\b(always run|remember to run|you (?:must|need to) run|"
                             r"make sure to run|in this repo(?:sitory)?,? we|here we always|"
                             r"we (?:always|never) )")),
    ("gotcha", re.compile(r"(?i)\b(turns out|gotcha|the catch is|watch out|beware|heads[- ]up|"
                          r"fyi|note for (?:next time|later|whoever)|for whoever|note to self|"
                          r"lesson learned|pitfall|worth knowing|keep (?:that|this|it) in mind|"
                          r"for future reference|keep (?:it|that|this) \w+ (?:whenever|until))\b"
                          r"|^(?:don'?t|do not|never)\b")),
)
#: Politeness and dismissals that start like a warning but teach nothing.
_NOT_A_LESSON = re.compile(r"(?i)^(?:don'?t|do not|never)\s+(?:worry|hesitate|mind)\b"
                           r"|\bnever ?mind\b|\?$")
_PATHISH = re.compile(r"(?<![\w/])((?:[\w.-]+/)+[\w.-]+\.\w+|[\w-]+\.(?:py|js|ts|tsx|rs|go|toml|"
                      r"json|ya?ml|md|cfg|ini|conf|env|lock|sh|sql|html|css)|\.env[\w.-]*)\b")
_CODE = re.compile(r"`([^`\n]{2,60})`")
#: A setting or environment variable (BILLING_API_URL), or a call (`str()`, Decimal(…)).
_SETTING = re.compile(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b")
_CALL = re.compile(r"\b([A-Za-z_][\w.]*)\(")
#: A project command written without backticks ("always run make migrate first").
_COMMAND = re.compile(r"\b((?:make|just|tox -e|npm run|yarn|pnpm|poetry run|uv run|python -m|"
                      r"cargo|go|docker compose|bundle exec|rake) [\w:.-]+)|(?<![\w/])(\./[\w.-]+)")


def lessons(steps: list[Step]) -> list[Candidate]:
    """Sentences that state a lesson about this project (see the module docstring)."""
    out: list[Candidate] = []
    for s in steps:
        if s.kind not in ("user", "assistant"):
            continue
        said = _sentences(s.text)
        for n, sentence in enumerate(said):
            if _NOT_A_LESSON.search(sentence):
                continue
            claim_type = next((t for t, pattern in _LESSONS if pattern.search(sentence)), None)
            if claim_type is None:
                continue
            # "Keep that in mind for …": the lesson is the sentence before, with this one
            quoted = said[n - 1:n + 1] if n and _POINTS_BACK.match(sentence) else [sentence]
            text = " ".join(quoted)
            subject = anchor(text)
            if not (subject or claim_type == "decision") or len(text) > LESSON_MAX_CHARS:
                continue  # advice that names nothing of this project, or a speech
            out.append(Candidate("lesson", text, claim_type, subject,
                                 2.5 if s.kind == "user" else 2.0,
                                 [(s.id, _excerpt(q)) for q in quoted]))
    return out


#: A sentence that points back at the one before it ("Keep that in mind …", "This is why").
_POINTS_BACK = re.compile(r"(?i)^(?:keep (?:that|this|it)|that|this|these|those|it|so)\b")


def anchor(sentence: str) -> str:
    """What of the project a sentence names (a path, a `code` span, a SETTING, a call, a
    command) as a claim's subject; "" when it names nothing: then it is no lesson about
    this project ("Don't forget to rebase before you merge")."""
    return (_first(_PATHISH, sentence) or _first(_CODE, sentence)
            or _first(_SETTING, sentence) or _first(_CALL, sentence)
            or _first(_COMMAND, sentence))


def _first(pattern: re.Pattern[str], text: str) -> str:
    m = pattern.search(text)
    return next((g for g in m.groups() if g), "") if m else ""


#: Where a sentence ends: after . ! ? and space, before a capital, a backtick, a quote — or
#: before a lower-case word (agents start sentences with `app.ini`, `slugkit 2.0`), unless
#: the period closes an abbreviation ("e.g. this").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'])"
                           r"|(?<![\s(]e\.g\.)(?<![\s(]i\.e\.)(?<!\betc\.)(?<!\bvs\.)"
                           r"(?<!\bcf\.)(?<=[\w`)\"'][.!?])\s+(?=[a-z])")


def _sentences(text: str) -> list[str]:
    """Sentences of prose: code blocks dropped, list markers stripped, 20-400 chars."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    out = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*>]|\d+[.)])\s+", "", line).strip()
        for part in _SENTENCE_END.split(line):
            part = part.strip()
            if 20 <= len(part) <= LESSON_MAX_CHARS:
                out.append(part)
    return out


def works_here(steps: list[Step]) -> list[Candidate]:
    """Invocations that had to be discovered (see the module docstring): the last variant
    that passed of each program, unless a failed plain invocation passed later."""
    out: dict[str, Candidate] = {}  # program → its latest passing variant
    failed: dict[str, set[str]] = {}  # program → the command lines of it that failed
    for s in steps:
        if s.kind != "result" or not s.command or s.failed is None:
            continue
        kind = check_kind(s.command)
        if not kind:
            continue
        program, key = _program(s.command), _key(s.command)
        if s.failed:
            failed.setdefault(program, set()).add(key)
            continue
        if key in failed.get(program, set()):  # what failed now passes as it is: the
            failed[program].discard(key)          # environment was fixed, not the command
            out.pop(program, None)
            continue
        if "\n" in s.command or len(key) > 300:
            continue
        tried = sorted(failed.get(program, set()) - {key})  # other variants that failed
        if not tried:
            continue  # nothing was discovered: a plain `pytest` teaches the fleet nothing
        claim = (f"`{key}` runs the {kind} here; `{tried[0][:200]}` failed earlier in the same "
                 "session (the flags/environment matter)")
        cites = [(s.id, last_line(s.text) or key[:EXCERPT_CHARS])]
        out[program] = Candidate("works_here", claim, "procedure", program or kind, 2.0, cites)
    return list(out.values())
