"""Transcripts in Claude Code's and Codex's JSONL formats, for the capture tests and bench.

The shapes follow what the CLIs write (Claude Code: ~/.claude/projects/<dir>/<id>.jsonl
entries with uuid/parentUuid/sessionId/cwd/gitBranch/message; Codex: rollout lines of
{timestamp, type, payload} with session_meta, response_item messages, function_call /
function_call_output pairs and apply_patch custom tool calls).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@dataclass
class Claude:
    """Builds a Claude Code transcript; each method returns the entry's uuid."""

    cwd: str
    session: str = "0f3c6a52-1111-4c1e-9a55-6d1f4c8e2a01"
    branch: str = "main"
    lines: list[dict[str, Any]] = field(default_factory=list)
    parent: str | None = None
    n: int = 0

    def _entry(self, kind: str, message: dict[str, Any], **extra: Any) -> str:
        self.n += 1
        uid = str(uuid.UUID(int=self.n + (hash(self.session) & 0xFFFF) * 10**6))
        entry = {"parentUuid": self.parent, "isSidechain": False, "userType": "external",
                 "cwd": self.cwd, "sessionId": self.session, "version": "2.0.14",
                 "gitBranch": self.branch, "type": kind, "message": message, "uuid": uid,
                 "timestamp": (T0 + timedelta(seconds=10 * self.n)).isoformat()
                 .replace("+00:00", "Z"), **extra}
        self.lines.append(entry)
        self.parent = uid
        return uid

    def user(self, text: str) -> str:
        return self._entry("user", {"role": "user", "content": text})

    def assistant(self, text: str) -> str:
        return self._entry("assistant", {
            "id": f"msg_{self.n}", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 5}},
            requestId=f"req_{self.n}")

    def tool(self, name: str, args: dict[str, Any], output: str, *, error: bool = False
             ) -> tuple[str, str]:
        """An assistant tool_use and the user tool_result that answers it: (call, result)."""
        tid = f"toolu_{self.n:04d}"
        call = self._entry("assistant", {
            "id": f"msg_{self.n}", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "stop_reason": "tool_use",
            "content": [{"type": "tool_use", "id": tid, "name": name, "input": args}]})
        result = self._entry("user", {"role": "user", "content": [
            {"tool_use_id": tid, "type": "tool_result", "content": output, "is_error": error}]},
            toolUseResult={"stdout": output, "stderr": "", "interrupted": False})
        return call, result

    def bash(self, command: str, output: str, code: int = 0) -> tuple[str, str]:
        text = output if code == 0 else f"Exit code {code}\n{output}"
        return self.tool("Bash", {"command": command, "description": "run"}, text,
                         error=code != 0)

    def edit(self, path: str, old: str = "a", new: str = "b") -> tuple[str, str]:
        return self.tool("Edit", {"file_path": path, "old_string": old, "new_string": new},
                         f"The file {path} has been updated.")

    def write(self, path: Path) -> Path:
        body = [{"type": "summary", "summary": "capture test", "leafUuid": self.parent}]
        path.write_text("".join(json.dumps(e) + "\n" for e in body + self.lines))
        return path


@dataclass
class Codex:
    """Builds a Codex rollout; each method returns the id a citation names."""

    cwd: str
    session: str = "5973b6c0-94b8-487b-a530-2aeb6098ae0e"
    branch: str = "main"
    repo_url: str = ""
    lines: list[dict[str, Any]] = field(default_factory=list)
    n: int = 0

    def __post_init__(self) -> None:
        self._line("session_meta", {
            "id": self.session, "timestamp": T0.isoformat().replace("+00:00", "Z"),
            "cwd": self.cwd, "originator": "codex_cli_rs", "cli_version": "0.46.0",
            "git": {"commit_hash": "0" * 40, "branch": self.branch,
                    "repository_url": self.repo_url}})
        self._line("response_item", {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "<environment_context>cwd</environment_context>"}]})

    def _line(self, kind: str, payload: dict[str, Any]) -> int:
        self.n += 1
        self.lines.append({"timestamp": (T0 + timedelta(seconds=10 * self.n)).isoformat()
                           .replace("+00:00", "Z"), "type": kind, "payload": payload})
        return len(self.lines)

    def user(self, text: str) -> str:
        return f"line-{self._line('response_item', {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': text}]})}"  # noqa: E501

    def assistant(self, text: str) -> str:
        return f"line-{self._line('response_item', {'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': text}]})}"  # noqa: E501

    def shell(self, command: str, output: str, code: int = 0) -> tuple[str, str]:
        call_id = f"call_{self.n:04d}"
        self._line("response_item", {
            "type": "function_call", "name": "shell", "call_id": call_id,
            "arguments": json.dumps({"command": ["bash", "-lc", command], "workdir": self.cwd})})
        self._line("response_item", {
            "type": "function_call_output", "call_id": call_id,
            "output": json.dumps({"output": output,
                                  "metadata": {"exit_code": code, "duration_seconds": 0.4}})})
        return call_id, call_id

    def patch(self, path: str) -> str:
        call_id = f"call_{self.n:04d}"
        self._line("response_item", {
            "type": "custom_tool_call", "status": "completed", "call_id": call_id,
            "name": "apply_patch",
            "input": f"*** Begin Patch\n*** Update File: {path}\n@@\n-a\n+b\n*** End Patch\n"})
        self._line("response_item", {"type": "custom_tool_call_output", "call_id": call_id,
                                     "output": "Success. Updated the following files:\nM "
                                     + path})
        return call_id

    def write(self, path: Path) -> Path:
        path.write_text("".join(json.dumps(e) + "\n" for e in self.lines))
        return path


def error_fix_claude(repo: Path) -> Claude:
    """A session that hits a failing test, edits the source, and passes, stating a lesson
    on the way (the source fix itself is in the diff: only the lesson is proposed)."""
    c = Claude(cwd=str(repo), branch="fix-slugs")
    c.user("The slug tests fail on main, please fix them")
    c.bash("pytest -q tests/test_slug.py", "E   AssertionError: 'a-b' != 'a--b'\n1 failed",
           code=1)
    c.assistant("Turns out `slugify` collapses repeated dashes only after lowercasing, so "
                "mixed-case input keeps the double dash.")
    c.edit(str(repo / "src" / "slug.py"))
    c.bash("pytest -q tests/test_slug.py", "3 passed in 0.12s")
    c.assistant("Fixed: src/slug.py now lowercases before collapsing dashes; the slug tests "
                "pass.")
    c.user("thanks, works")
    return c


def config_fix_claude(repo: Path) -> Claude:
    """A failing test fixed in the configuration, not the code: an error→fix that teaches
    what the code will not show, stated as a lesson the fix's evidence then backs."""
    c = Claude(cwd=str(repo), branch="fix-imports")
    c.user("The slug tests cannot even import, please fix them")
    c.bash("pytest -q tests/test_slug.py",
           ">   import slug\nE   ModuleNotFoundError: No module named 'slug'\n"
           "tests/test_slug.py:1: ModuleNotFoundError\n1 error", code=1)
    c.bash("cat setup.cfg", "[tool:pytest]\naddopts = -q")
    c.edit(str(repo / "setup.cfg"), old="[tool:pytest]\n", new="[tool:pytest]\npythonpath = src\n")
    c.bash("pytest -q tests/test_slug.py", "...\n3 passed in 0.12s")
    c.assistant("Turns out pytest does not put src/ on the import path in this repo: "
                "setup.cfg needs `pythonpath = src` under [tool:pytest].")
    c.user("thanks, works")
    return c


def rich_claude(repo: Path) -> Claude:
    """One candidate of each extractor: a configuration fix, a discovered invocation, a
    lesson."""
    c = Claude(cwd=str(repo), branch="fix-slugs")
    c.user("The slug tests fail on main, please fix them. Always run make migrate before the "
           "tests, the test database is not created otherwise.")
    c.bash("pytest -q tests/test_slug.py",
           "E   ModuleNotFoundError: No module named 'slug'\n1 error", code=1)
    c.edit(str(repo / "setup.cfg"), old="[tool:pytest]\n", new="[tool:pytest]\npythonpath = src\n")
    c.bash("pytest -q tests/test_slug.py", "3 passed in 0.12s")
    c.assistant("With pythonpath set in setup.cfg the slug tests import src/slug.py.")
    c.bash("pytest -q", "E   ImproperlyConfigured: settings are not configured", code=1)
    c.bash("DJANGO_SETTINGS_MODULE=app.settings pytest -q", "58 passed in 3.1s")
    c.assistant("Fixed: the slug tests import again and the whole suite passes.")
    c.user("thanks, works")
    return c


def failing_claude(repo: Path) -> Claude:
    c = Claude(cwd=str(repo))
    c.user("Make the build pass with the new compiler")
    c.bash("make build", "gcc: error: unrecognized option '-fnew'\nmake: *** [build] Error 1",
           code=2)
    c.edit(str(repo / "Makefile"))
    c.bash("make build", "ld: undefined reference to `frob'\nmake: *** [build] Error 1", code=2)
    c.assistant("The link step still fails on an undefined reference to frob.")
    return c
