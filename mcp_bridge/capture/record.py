"""The session record a transcript yields: repo, branch, start, changed paths, summary, outcome.

Every rule here is deterministic (docs/capture.md says each in prose): the same
transcript and working tree always give the same record.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from mcp_bridge.capture.transcript import Step, Transcript
from mcp_bridge.contract import events as ev

ASK_MAX_CHARS = 800
CONCLUSION_MAX_CHARS = 2400

#: A command that builds, tests or lints: the signal the outcome reads first.
_CHECK = re.compile(
    r"(?:^|[\s;&|(])(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?"
    r"(pytest|py\.test|tox|nox|ruff|mypy|pyright|flake8|pylint|black\s+--check|lint-imports"
    r"|(?:python3?|uv run|poetry run)\s+-m\s+(?:pytest|unittest|mypy|ruff|django\s+test)"
    r"|manage\.py\s+test|npm\s+(?:run\s+)?(?:test|build|lint)|yarn\s+(?:test|build|lint)"
    r"|pnpm\s+(?:run\s+)?(?:test|build|lint)|npx\s+(?:jest|vitest|tsc|eslint|playwright\s+test)"
    r"|jest|vitest|playwright\s+test"
    r"|tsc|eslint|cargo\s+(?:test|build|check|clippy)|go\s+(?:test|build|vet)"
    r"|make(?:\s+[\w.-]+)?|gradle\w*\s+\w+|mvn\s+\w+|ctest|cmake\s+--build)\b")


def check_kind(command: str) -> str | None:
    """"test", "build" or "lint" for a command that checks the work, else None."""
    m = _CHECK.search(command)
    if not m:
        return None
    word = m.group(1)
    if re.search(r"test|jest|vitest|tox|nox|unittest|ctest", word):
        return "test"
    if re.search(r"ruff|mypy|pyright|flake8|pylint|black|lint|eslint|tsc|clippy|vet|check",
                 word):
        return "lint"
    return "build"


#: An explicit verdict in the user's last message. Order: abandon, then fail, then success.
_ABANDON = re.compile(r"(?i)\b(never ?mind|forget (?:it|this)|let'?s stop|stop here|give up|"
                      r"abandon|drop (?:it|this)|not worth it)\b")
_FAIL = re.compile(r"(?i)\b(still (?:fails|failing|broken|doesn'?t work)"
                   r"|(?:does ?n[o']t|did ?n[o']t|isn'?t) work(?:ing)?|broke|broken|wrong"
                   r"|not fixed|revert)\b")
_SUCCESS = re.compile(r"(?i)^\W*(?:thanks?|thank you|lgtm|looks good|perfect|great|works|"
                      r"that works|it works|ship it|all good|nice|done)\b")


@dataclass
class Record:
    root: Path | None = None  # the git work tree, when the session ran in one
    cwd: str = ""
    repo: str = ""
    branch: str = ""
    started_at: str = ""
    changed_paths: list[str] = field(default_factory=list)
    summary: str = ""
    outcome: str | None = None  # one of ev.SESSION_OUTCOMES, or None for unknown
    why: str = ""  # which signal decided the outcome

    def relative(self, raw: str) -> str:
        """A path a tool named, as a claim should: repo-relative, else as written."""
        return relative_path(raw, self.root, self.cwd) or raw

    def payload(self) -> dict[str, Any]:
        """The session.end payload fields this record fills (absent when unknown)."""
        out: dict[str, Any] = {"outcome": self.outcome, "summary": self.summary or None}
        if self.changed_paths:
            out["changed_paths"] = self.changed_paths[:ev.CHANGED_PATHS_MAX]
        for key in ("repo", "branch", "started_at"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out


def build(t: Transcript, *, cwd: str = "", start: str | None = None) -> Record:
    """The record; `start` is the commit the session started at, when its hook noted one."""
    cwd = cwd or t.cwd
    root = repo_root(Path(cwd)) if cwd else None
    edited = changed_paths(t.steps, root, cwd)
    return Record(
        root=root, cwd=cwd,
        repo=repo_name(root, cwd, t.repo_url),
        branch=(t.branch or git_branch(root))[:ev.BRANCH_MAX_CHARS],
        started_at=_instant(t.started_at),
        changed_paths=list(dict.fromkeys([*edited, *diffed_paths(root, start)]))[
            :ev.CHANGED_PATHS_MAX],
        summary=summary(t.steps),
        **cast("dict[str, Any]", dict(zip(("outcome", "why"), outcome(t.steps), strict=True))),
    )


def _instant(value: str) -> str:
    return value if value and ev.instant_problem(value, "started_at") is None else ""


def repo_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", re.I)


def repo_name(root: Path | None, cwd: str, remote: str = "") -> str:
    """The git remote (origin's URL, credentials stripped), else the work tree's folder name."""
    if root is not None and not remote:
        remote = _git(root, "config", "--get", "remote.origin.url")
    if remote:
        return _USERINFO.sub(r"\1", remote.strip())[:ev.REPO_MAX_CHARS]
    folder = root or (Path(cwd) if cwd else None)
    return folder.name[:ev.REPO_MAX_CHARS] if folder else ""


def git_branch(root: Path | None) -> str:
    if root is None:
        return ""
    branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
    return "" if branch == "HEAD" else branch


def _git(root: Path, *args: str) -> str:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=5,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    text = done.stdout.decode("utf-8", "replace").strip()
    return text if done.returncode == 0 and text.isprintable() else ""


def relative_path(raw: str, root: Path | None, cwd: str) -> str | None:
    """`raw` (as a tool wrote it) relative to the work tree (else to cwd), or None outside it.

    A path outside the work tree is left out: claims cite repo-relative paths, and a /tmp
    scratch file marks nothing stale.
    """
    p = Path(raw)
    if not p.is_absolute():
        if not cwd:
            rel = os.path.normpath(raw)
            return None if rel.startswith("..") else rel
        p = Path(cwd) / p
    p = Path(os.path.normpath(p))
    base = root if root is not None else (Path(cwd) if cwd else None)
    if base is None:
        return None
    try:
        rel = p.relative_to(base).as_posix()
    except ValueError:
        return None
    ok = rel and rel != "." and len(rel) <= ev.PATH_MAX_CHARS and rel.isprintable()
    return rel if ok else None


def changed_paths(steps: list[Step], root: Path | None, cwd: str) -> list[str]:
    """Repo-relative files the session's edit tools wrote, first-edit order, deduplicated."""
    out = (relative_path(raw, root, cwd) for s in steps if s.kind == "call" for raw in s.paths)
    return [p for p in dict.fromkeys(out) if p][:ev.CHANGED_PATHS_MAX]


def diffed_paths(root: Path | None, start: str | None) -> list[str]:
    """`git diff --name-only <start>`: files that differ between the start commit and the
    work tree now (commits made in the session and uncommitted edits alike), repo-relative.
    Nothing without a work tree or a start commit (a backfill, a session that began
    outside git)."""
    if root is None or not start:
        return []
    try:
        done = subprocess.run(["git", "-C", str(root), "diff", "--name-only", "--no-renames",
                               "-z", start, "--"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    listed = done.stdout.decode("utf-8", "replace").split("\0")
    return [p for p in listed if p and len(p) <= ev.PATH_MAX_CHARS and p.isprintable()][
        :ev.CHANGED_PATHS_MAX]


def summary(steps: list[Step]) -> str:
    """"Asked: <first user message>" and "Concluded: <last assistant message>", bounded."""
    asked = next((s.text for s in steps if s.kind == "user"), "")
    said = next((s.text for s in reversed(steps) if s.kind == "assistant"), "")
    parts = []
    if asked:
        parts.append("Asked: " + _clip(asked, ASK_MAX_CHARS))
    if said:
        parts.append("Concluded: " + _clip(said, CONCLUSION_MAX_CHARS))
    return "\n".join(parts)[:ev.SUMMARY_MAX_CHARS]


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def outcome(steps: list[Step]) -> tuple[str | None, str]:
    """(outcome, the signal that decided it), first signal that speaks wins:

    1. the user's last message, if it comes after the last check and gives a verdict:
       "never mind / give up / let's stop" → abandoned; "still failing / doesn't work"
       → failed; "thanks / lgtm / works" (at its start) → success;
    2. the last build/test/lint command's result: failed → failed; passed → success, or
       partial when a later tool error was left unresolved (no later call succeeded);
    3. no check ran: an unresolved tool error at the end → failed;
    4. otherwise unknown (null).
    """
    checks = [i for i, s in enumerate(steps)
              if s.kind == "result" and s.failed is not None and check_kind(s.command)]
    last_check = checks[-1] if checks else -1
    users = [i for i, s in enumerate(steps) if s.kind == "user"]
    last_user = users[-1] if len(users) > 1 else -1  # the first is the ask, not a verdict
    if last_user > last_check:
        text = steps[last_user].text
        if _ABANDON.search(text):
            return "abandoned", "the user's last message abandons the task"
        if _FAIL.search(text):
            return "failed", "the user's last message says it does not work"
        if _SUCCESS.search(text):
            return "success", "the user's last message approves"
    results = [i for i, s in enumerate(steps) if s.kind == "result" and s.failed is not None]
    unresolved = bool(results) and steps[results[-1]].failed is True
    if last_check >= 0:
        check = steps[last_check]
        name = check.command.split("\n")[0][:80]
        if check.failed:
            return "failed", f"the last check failed: {name}"
        if unresolved and results[-1] > last_check:
            return "partial", f"the last check passed ({name}) but a later error was left"
        return "success", f"the last check passed: {name}"
    if unresolved:
        return "failed", "the session ended on a tool error"
    return None, "no check ran and no verdict was given"
