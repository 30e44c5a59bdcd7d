"""install/uninstall round trips on real-looking configs of each runtime, in a temp home."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge import install

DATA = Path(__file__).parent / "data" / "runtime-configs"


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A project and a home with each runtime's example config in its real place."""
    home, project = tmp_path / "home", tmp_path / "project"
    monkeypatch.setenv("CTXLAKE_HOME", str(tmp_path / "ctxlake"))
    monkeypatch.delenv("CTXLAKE_CACHE_DIR", raising=False)
    monkeypatch.delenv("CTXLAKE_SPOOL_DIR", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    files = {
        "claude-code": project / ".mcp.json",
        "claude-hooks": project / ".claude" / "settings.json",
        "cursor": project / ".cursor" / "mcp.json",
        "codex": home / ".codex" / "config.toml",
    }
    sources = {"claude-code": "claude-code/mcp.json", "claude-hooks": "claude-code/settings.json",
               "cursor": "cursor/mcp.json", "codex": "codex/config.toml"}
    for key, path in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(DATA / sources[key], path)
    return {"home": home, "project": project, "root": tmp_path, **files}


def _run(where: dict[str, Path], command: str, runtime: str, *extra: str) -> int:
    args = ["--runtime", runtime, "--home", str(where["home"]), "--project", str(where["project"])]
    if command == "install":
        args += ["--fleet", "acme", "--agent", "ada"]
    return install.main([*args, *extra], command=command)


def _parse(path: Path) -> dict[str, Any]:
    text = path.read_text()
    return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)


def _servers(path: Path) -> dict[str, Any]:
    data = _parse(path)
    return data.get("mcp_servers") or data.get("mcpServers") or {}


@pytest.mark.parametrize("runtime", ["claude-code", "cursor", "codex"])
def test_it_round_trips_each_runtime_keeping_every_other_entry(
    runtime: str, where: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = where[runtime]
    original_text, original = path.read_text(), _parse(path)
    assert _run(where, "install", runtime) == 0
    out = capsys.readouterr().out
    assert f"+++ {path} (after)" in out and "ctxlake" in out
    entry = _servers(path)["ctxlake"]
    assert entry["command"] == sys.executable and entry["args"] == ["-m", "mcp_bridge"]
    assert entry["env"]["CTXLAKE_FLEET_ID"] == "acme" and entry["env"]["CTXLAKE_AGENT_ID"] == "ada"
    assert entry["env"]["PYTHONPATH"] == str(install.PROJECT_ROOT)
    assert entry["env"]["CTXLAKE_HOME"] == str(where["root"] / "ctxlake")
    others = {k: v for k, v in _servers(path).items() if k != "ctxlake"}
    assert others == (original.get("mcp_servers") or original.get("mcpServers"))
    backups = list(path.parent.glob(f"{path.name}.ctxlake-backup-*"))
    assert len(backups) == 1 and backups[0].read_text() == original_text

    assert _run(where, "install", runtime) == 0  # idempotent
    assert "no changes" in capsys.readouterr().out
    assert len(list(path.parent.glob(f"{path.name}.ctxlake-backup-*"))) == 1

    assert _run(where, "uninstall", runtime) == 0
    assert _parse(path) == original
    if runtime == "codex":  # comments and layout survive, byte for byte
        assert path.read_text() == original_text
    assert _run(where, "uninstall", runtime) == 0
    assert "no changes" in capsys.readouterr().out


def test_codex_keeps_comments_next_to_our_table(where: dict[str, Path]) -> None:
    _run(where, "install", "codex")
    text = where["codex"].read_text()
    for comment in ("# Codex CLI configuration", "# ask before running commands",
                    "# The docs server", "# quiet", "# Profiles come last."):
        assert comment in text
    _run(where, "install", "codex", "--agent", "ada-2")  # a changed entry is replaced in place
    assert tomllib.loads(where["codex"].read_text())["mcp_servers"]["ctxlake"]["env"][
        "CTXLAKE_AGENT_ID"] == "ada-2"
    assert where["codex"].read_text().count("[mcp_servers.ctxlake]") == 1


def test_a_dry_run_prints_the_diff_and_writes_nothing(
    where: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = {k: where[k].read_bytes() for k in ("claude-code", "claude-hooks")}
    assert _run(where, "install", "claude-code", "--dry-run") == 0
    out = capsys.readouterr().out
    assert '+    "ctxlake": {' in out and "hook session-start" in out and "dry run" in out
    assert {k: where[k].read_bytes() for k in before} == before
    assert not list(where["project"].rglob("*.ctxlake-backup-*"))


def test_claude_code_hooks_are_added_beside_the_users_and_removed_alone(
    where: dict[str, Path]
) -> None:
    original = _parse(where["claude-hooks"])
    _run(where, "install", "claude-code")
    hooks = _parse(where["claude-hooks"])["hooks"]
    start = [h["command"] for g in hooks["SessionStart"] for h in g["hooks"]]
    assert start[0] == "echo 'remember: run make lint'"
    assert start[1].endswith("-m mcp_bridge hook session-start")
    assert hooks["SessionEnd"][0]["hooks"][0]["command"].endswith("hook session-end")
    assert hooks["PostToolUse"] == original["hooks"]["PostToolUse"]
    assert _parse(where["claude-hooks"])["permissions"] == original["permissions"]
    _run(where, "uninstall", "claude-code")
    assert _parse(where["claude-hooks"]) == original


def test_the_installed_hook_command_runs_and_answers_in_claude_codes_form(
    where: dict[str, Path]
) -> None:
    _run(where, "install", "claude-code")
    group = _parse(where["claude-hooks"])["hooks"]["SessionStart"][1]
    done = subprocess.run(["sh", "-c", group["hooks"][0]["command"]], input=b'{"session_id": "s"}',
                          capture_output=True, timeout=30, cwd=where["project"])
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "no briefing rendered yet for fleet 'acme'" in answer["hookSpecificOutput"][
        "additionalContext"]


def test_user_scope_writes_the_users_own_files(where: dict[str, Path]) -> None:
    _run(where, "install", "claude-code", "--scope", "user")
    assert "ctxlake" in _servers(where["home"] / ".claude.json")
    assert "SessionEnd" in _parse(where["home"] / ".claude" / "settings.json")["hooks"]
    _run(where, "install", "cursor", "--scope", "user")
    assert "ctxlake" in _servers(where["home"] / ".cursor" / "mcp.json")


def test_it_refuses_configs_it_cannot_edit_safely(
    where: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    where["cursor"].write_text("{ not json")
    assert _run(where, "install", "cursor") == 1
    assert where["cursor"].read_text() == "{ not json"
    where["codex"].write_text('[mcp_servers]\nctxlake = { command = "mine" }\n')
    assert _run(where, "install", "codex") == 1
    assert "inline" in capsys.readouterr().err
    assert where["codex"].read_text() == '[mcp_servers]\nctxlake = { command = "mine" }\n'


def test_it_creates_a_config_that_did_not_exist(tmp_path: Path) -> None:
    config = tmp_path / "fresh" / "config.toml"
    code = install.main(["--runtime", "codex", "--fleet", "f", "--agent", "a", "--config",
                         str(config)], command="install")
    assert code == 0 and "ctxlake" in tomllib.loads(config.read_text())["mcp_servers"]
    install.main(["--runtime", "codex", "--config", str(config)], command="uninstall")
    assert config.read_text() == ""
