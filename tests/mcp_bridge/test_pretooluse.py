"""`hook pre-tool-use`: Claude Code's PreToolUse answer for an edit inside another's lease.

The real hook process, in a real temp git repository, against a cached roster; every test
runs through three doors: the script install writes (`python -I -S mcp_bridge/pretool.py`,
which answers the silent cases itself), the same script while a real bridge of the same
home is running (it then asks the bridge, mcp_bridge.hook_door: every answer here must
come from the bridge, never from the script importing the hook), and
`python -m mcp_bridge hook pre-tool-use`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge import testing
from tests.mcp_bridge.data import ago, ahead
from tests.mcp_bridge.stdio import ROOT

FLEET = "acme"
SCRIPT = [sys.executable, "-I", "-S", str(ROOT / "mcp_bridge" / "pretool.py")]
DOORS = {"script": SCRIPT, "script, bridge running": [*SCRIPT[:1], "-X", "importtime",
                                                      *SCRIPT[1:]],
         "module": [sys.executable, "-m", "mcp_bridge", "hook", "pre-tool-use"]}
_door: list[str] = DOORS["script"]
_bridge: subprocess.Popen[bytes] | None = None


@pytest.fixture(autouse=True, params=sorted(DOORS))
def door(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """Each test, once per way the hook is started (the module's `_hook` reads it)."""
    global _door, _bridge
    _door = DOORS[request.param]
    if request.param != "script, bridge running":
        yield _door
        return
    _bridge = start_bridge(tmp_path / "home")
    try:
        yield _door
    finally:
        stop_bridge(_bridge, tmp_path / "home")
        _bridge = None


def start_bridge(home: Path) -> subprocess.Popen[bytes]:
    """A real bridge (`python -m mcp_bridge`) of `home`, once its hook door listens."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CTXLAKE_HOME": str(home),
           "CTXLAKE_FLEET_ID": FLEET, "CTXLAKE_AGENT_ID": "ada"}
    proc = subprocess.Popen([sys.executable, "-m", "mcp_bridge"], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            cwd=ROOT)
    sock = home / "run" / "hooks" / f"{proc.pid}.sock"
    for _ in range(600):
        if sock.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert sock.exists(), f"the bridge (exit {proc.poll()}) opened no hook door"
    return proc


def stop_bridge(proc: subprocess.Popen[bytes], home: Path) -> None:
    """End of input: the bridge leaves, and takes its socket with it."""
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert not (home / "run" / "hooks" / f"{proc.pid}.sock").exists()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "payments").mkdir(parents=True)
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"],
                 ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    testing.build_cache(tmp_path / "cache", FLEET, snapshot=False, agents=[
        {"agent_id": "bo", "leases": [
            {"path": "src/payments/**", "reason": "refund rework", "expires_at": ahead(hours=1)},
            {"path": "old.py", "reason": "gone", "expires_at": ago(minutes=5)}]},
        {"agent_id": "ada", "leases": [{"path": "docs", "expires_at": ahead(hours=1)}]},
    ])
    return root


def _hook(repo: Path, body: Any, *args: str, cache: bool = True,
          ) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CTXLAKE_FLEET_ID": FLEET,
           "CTXLAKE_AGENT_ID": "ada", "CTXLAKE_HOME": str(repo.parent / "home"),
           "CTXLAKE_CACHE_DIR": str(repo.parent / ("cache" if cache else "nothing"))}
    stdin = body if isinstance(body, str) else json.dumps(body)
    done = subprocess.run([*_door, *args],
                          input=stdin, capture_output=True, text=True, env=env, cwd=repo,
                          timeout=30)
    if _bridge is not None:  # the bridge answered whatever the script did not
        imported = _imports(done.stderr)
        assert "mcp_bridge.hooks" not in imported and "json" not in imported, body
        done.stderr = "".join(line for line in done.stderr.splitlines(keepends=True)
                              if not line.startswith("import time:"))
    return done


def _imports(stderr: str) -> set[str]:
    """The modules `python -X importtime` says it imported."""
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines()
            if line.startswith("import time:")}


def _edit(repo: Path, path: str, tool: str = "Edit") -> dict[str, Any]:
    key = "notebook_path" if tool == "NotebookEdit" else "file_path"
    return {"session_id": "s", "hook_event_name": "PreToolUse", "cwd": str(repo),
            "tool_name": tool, "tool_input": {key: str(repo / path), "old_string": "a"}}


@pytest.mark.parametrize("tool", ["Edit", "Write", "MultiEdit", "NotebookEdit"])
def test_an_edit_in_another_agents_lease_tells_the_model_who_why_and_until(
    repo: Path, tool: str,
) -> None:
    done = _hook(repo, _edit(repo, "src/payments/api.py", tool))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    specific = answer["hookSpecificOutput"]
    assert specific["hookEventName"] == "PreToolUse" and "permissionDecision" not in specific
    text = specific["additionalContext"]
    assert "src/payments/api.py is leased by bo (src/payments/**) until " in text
    assert "refund rework" in text and "advisory" in text
    assert answer["systemMessage"] == text


def test_strict_denies_with_the_reason(repo: Path) -> None:
    done = _hook(repo, _edit(repo, "src/payments/api.py"), "--strict")
    specific = json.loads(done.stdout)["hookSpecificOutput"]
    assert done.returncode == 0
    assert specific["permissionDecision"] == "deny"
    assert "leased by bo" in specific["permissionDecisionReason"]


@pytest.mark.parametrize("path", ["src/other.py", "docs/readme.md", "old.py"])
def test_free_own_and_expired_paths_say_nothing(repo: Path, path: str) -> None:
    done = _hook(repo, _edit(repo, path), "--strict")
    assert (done.returncode, done.stdout) == (0, "")


def test_a_relative_path_is_taken_from_the_cwd(repo: Path) -> None:
    body = {**_edit(repo, "x"), "tool_input": {"file_path": "src/payments/new.py"}}
    assert "leased by bo" in _hook(repo, body).stdout


def test_a_git_commit_in_bash_checks_the_staged_paths(repo: Path) -> None:
    (repo / "src" / "payments" / "api.py").write_text("x\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=repo, check=True)
    (repo / "src" / "payments" / "api.py").write_text("changed\n")  # tracked, not staged
    (repo / "src" / "free.py").write_text("x\n")
    subprocess.run(["git", "add", "src/free.py"], cwd=repo, check=True)

    def bash(command: str) -> str:
        return _hook(repo, {"cwd": str(repo), "tool_name": "Bash",
                            "tool_input": {"command": command}}).stdout

    assert bash("git commit -m 'free only'") == ""
    assert "src/payments/api.py is leased by bo" in bash("git commit -am 'all of it'")
    subprocess.run(["git", "add", "src/payments/api.py"], cwd=repo, check=True)
    assert "leased by bo" in bash("cd . && git commit -m x")
    assert "leased by bo" in bash("FOO=1 git -C . commit -m x")
    assert bash("git status") == "" and bash("echo git commit") == ""


def test_it_never_fails_the_turn(repo: Path, tmp_path: Path) -> None:
    for body in ("\xff not json", "[]", {"tool_name": "Edit", "tool_input": "x"},
                 {"tool_name": "Edit", "tool_input": {"file_path": "/elsewhere/x.py"}},
                 {"tool_name": "Read", "tool_input": {"file_path": str(repo / "src/payments/a")}}):
        done = _hook(repo, body)
        assert (done.returncode, done.stdout) == (0, ""), body
    no_cache = _hook(repo, _edit(repo, "src/payments/api.py"), cache=False)
    assert (no_cache.returncode, no_cache.stdout) == (0, "")
    assert "not checking leases" in no_cache.stderr


def _spooled(repo: Path) -> list[dict[str, Any]]:
    path = repo.parent / "home" / "spool" / "mcp" / f"{FLEET}.ndjson"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_warned_edit_spools_one_intrusion_for_the_holder(repo: Path) -> None:
    _hook(repo, _edit(repo, "src/payments/api.py"))
    [event] = _spooled(repo)
    assert (event["kind"], event["agent"], event["session"]) == ("lease.intrusion", "ada", "s")
    assert event["payload"] == {"paths": ["src/payments/api.py"], "holder": "bo",
                                "tool": "edit"}


def test_a_denied_or_free_edit_spools_nothing(repo: Path) -> None:
    _hook(repo, _edit(repo, "src/payments/api.py"), "--strict")  # blocked: nothing happened
    _hook(repo, _edit(repo, "src/other.py"))
    assert _spooled(repo) == []


#: What the warning path must not import (each costs ~5-10 ms at every spawn, issue 26):
#: `uuid` imports `platform`; `dataclasses` imports `inspect`; `argparse` gettext.
NOT_ON_THE_WARNING_PATH = ("uuid", "platform", "dataclasses", "inspect", "argparse")


def test_the_warning_path_imports_nothing_expensive(repo: Path) -> None:
    """Import costs, checked as names rather than as times (no wall time in tests): a
    warned edit spools its intrusion without `uuid`, `dataclasses` or `argparse`."""
    global _door
    if _door is not DOORS["script"]:
        pytest.skip("the module door runs runpy and site: measured by bench/hook_bench.py; "
                    "with a bridge running, _hook checks that the script imports no hook")
    saved, _door = _door, [sys.executable, "-X", "importtime", *_door[1:]]
    try:
        done = _hook(repo, _edit(repo, "src/payments/api.py"))
    finally:
        _door = saved
    assert "leased by bo" in done.stdout
    assert len(_spooled(repo)) == 1
    imported = _imports(done.stderr)
    assert "mcp_bridge.contract.spool" in imported  # the parse below reads real output
    assert imported.isdisjoint(NOT_ON_THE_WARNING_PATH), imported & set(NOT_ON_THE_WARNING_PATH)


def test_a_commit_while_no_other_agent_holds_a_lease_is_silent(repo: Path) -> None:
    """The script answers it without asking git (pretool.silent); the same silence as the
    full hook's, and a roster it cannot read still goes to the full hook's note."""
    (repo / "src" / "payments" / "api.py").write_text("x\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    testing.build_cache(repo.parent / "cache", FLEET, snapshot=False, agents=[
        {"agent_id": "ada", "leases": [{"path": "src/**", "expires_at": ahead(hours=1)}]},
        {"agent_id": "cy", "leases": []}])
    commit = {"cwd": str(repo), "tool_name": "Bash", "tool_input": {"command": "git commit"}}
    done = _hook(repo, commit)
    assert (done.stdout, done.stderr, done.returncode) == ("", "", 0)
    assert "not checking leases" in _hook(repo, commit, cache=False).stderr
