"""install/uninstall round trips on real-looking configs of each runtime, in a temp home."""

from __future__ import annotations

import difflib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

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
    monkeypatch.delenv("HERMES_HOME", raising=False)
    files = {
        "claude-code": project / ".mcp.json",
        "claude-hooks": project / ".claude" / "settings.json",
        "cursor": project / ".cursor" / "mcp.json",
        "codex": home / ".codex" / "config.toml",
        "hermes": home / ".hermes" / "config.yaml",
    }
    sources = {"claude-code": "claude-code/mcp.json", "claude-hooks": "claude-code/settings.json",
               "cursor": "cursor/mcp.json", "codex": "codex/config.toml",
               "hermes": "hermes/config.yaml"}
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
    if path.suffix == ".yaml":
        return yaml.safe_load(text) or {}
    return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)


def _backups(where: dict[str, Path]) -> list[Path]:
    return sorted((where["root"] / "ctxlake" / "backups").glob("*"))


def _launcher_env(launcher: Path) -> dict[str, str]:
    """What the launcher really hands the bridge: run it with `env` in place of python.
    A runtime's link (what a shared file names) is followed to the launcher it starts."""
    script = launcher.read_text()
    link = re.search(r"^exec (\S+) \"\$@\"$", script, re.MULTILINE)
    if link:
        script = Path(shlex.split(link.group(1))[0]).read_text()
    script = script.replace(f"exec {sys.executable} -m mcp_bridge", "exec env")
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True,
                          env={"PATH": "/usr/bin:/bin"})
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def _servers(path: Path) -> dict[str, Any]:
    data = _parse(path)
    return data.get("mcp_servers") or data.get("mcpServers") or {}


@pytest.mark.parametrize("runtime", ["claude-code", "cursor", "codex", "hermes"])
def test_it_round_trips_each_runtime_keeping_every_other_entry(
    runtime: str, where: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = where[runtime]
    original_text, original = path.read_text(), _parse(path)
    assert _run(where, "install", runtime) == 0
    out = capsys.readouterr().out
    assert f"+++ {path} (after)" in out and "ctxlake" in out
    entry = _servers(path)["ctxlake"]
    if runtime in ("codex", "hermes"):  # the user's own file: personal values go straight in
        assert entry["command"] == sys.executable and entry["args"] == ["-m", "mcp_bridge"]
        personal = entry["env"]
    else:  # a committed project file: only the launcher's name, in the runtime's syntax
        home_var = "${HOME}" if runtime == "claude-code" else "${userHome}"
        link = f".ctxlake/bin/ctxlake-mcp-acme+{runtime}"
        assert entry == {"command": f"{home_var}/{link}", "args": []}
        assert "ada" not in path.read_text() and sys.executable not in path.read_text()
        personal = _launcher_env(where["home"] / link)
    assert personal["CTXLAKE_FLEET_ID"] == "acme" and personal["CTXLAKE_AGENT_ID"] == "ada"
    assert personal["PYTHONPATH"] == str(install.PROJECT_ROOT)
    assert personal["CTXLAKE_HOME"] == str(where["root"] / "ctxlake")
    others = {k: v for k, v in _servers(path).items() if k != "ctxlake"}
    assert others == (original.get("mcp_servers") or original.get("mcpServers"))
    backups = _backups(where)
    assert [b.read_text() for b in backups if path.name in b.name][:1] == [original_text]
    assert not list(where["root"].glob("project/**/*backup*"))

    assert _run(where, "install", runtime) == 0  # idempotent
    assert "no changes" in capsys.readouterr().out
    assert _backups(where) == backups

    assert _run(where, "uninstall", runtime) == 0
    assert _parse(path) == original
    if runtime in ("codex", "hermes"):  # comments and layout survive, byte for byte
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


_FAILING_HOOKS_WRITE = """
import sys
from mcp_bridge import install
wrote = install.write
def write(change):
    if change.path.name == "settings.json":
        raise OSError(28, "No space left on device")
    return wrote(change)
install.write = write
sys.exit(install.main(sys.argv[1:]))
"""


def _install_into_head(where: dict[str, Path], *extra: str,
                       failing: bool = False) -> subprocess.CompletedProcess[str]:
    """`install … | head -1` in bash with pipefail (the status is install's), its report
    long enough to fill the pipe: the hooks file padded, so its diff is ~200 kB and the
    closed pipe is surely written to (a short report could fit in the pipe's buffer)."""
    where["claude-hooks"].write_text(json.dumps({"padding": ["x" * 100] * 2000}, indent=1))
    run = ["-c", _FAILING_HOOKS_WRITE] if failing else ["-m", "mcp_bridge", "install"]
    command = [sys.executable, *run, "--runtime", "claude-code", "--fleet", "acme",
               "--agent", "ada", "--home", str(where["home"]), "--project",
               str(where["project"]), *extra]
    return subprocess.run(f"set -o pipefail; {shlex.join(command)} | head -1", shell=True,
                          capture_output=True, text=True, timeout=60,
                          cwd=Path(install.__file__).parents[1], executable="/bin/bash")


def test_a_reader_that_stops_early_still_gets_a_whole_install(where: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """`install … | head -1`: the pipe closes after the first line of the first diff, and
    both files (the server entry and the hooks) are written all the same, the `--server`
    settings are remembered after them, and the command exits 0 without a word on stderr:
    the reader leaving is not a failure."""
    before = {"claude-code": where["claude-code"].read_bytes()}
    token = tmp_path / "token"
    token.write_text("t0ken")
    done = _install_into_head(where, "--server", "http://127.0.0.1:9", "--token-file",
                              str(token))
    assert done.returncode == 0 and done.stderr == "", done
    assert done.stdout.startswith("--- "), done
    assert where["claude-code"].read_bytes() != before["claude-code"]
    assert "ctxlake" in _servers(where["claude-code"])
    assert "hook session-start" in where["claude-hooks"].read_text()
    remembered = json.loads((tmp_path / "ctxlake" / "remotes" / "acme.json").read_text())
    assert remembered["server"] == "http://127.0.0.1:9"


def test_a_write_that_fails_is_still_an_error_when_the_reader_has_left(
        where: dict[str, Path]) -> None:
    """The report's pipe closing does not hide a failed write: exit 1 and the error on
    stderr, the server entry written before it kept."""
    done = _install_into_head(where, failing=True)
    assert done.returncode == 1, done
    assert done.stderr == "ctxlake install: [Errno 28] No space left on device\n", done
    assert "ctxlake" in _servers(where["claude-code"])
    assert "hook session-start" not in where["claude-hooks"].read_text()


def test_claude_code_hooks_are_added_beside_the_users_and_removed_alone(
    where: dict[str, Path]
) -> None:
    original = _parse(where["claude-hooks"])
    _run(where, "install", "claude-code")
    hooks = _parse(where["claude-hooks"])["hooks"]
    start = [h["command"] for g in hooks["SessionStart"] for h in g["hooks"]]
    assert start[0] == "echo 'remember: run make lint'"
    link = '"$HOME/.ctxlake/bin/ctxlake-mcp-acme+claude-code"'
    assert start[1] == f"[ ! -x {link} ] || exec {link} hook session-start"
    assert hooks["SessionEnd"][0]["hooks"][0]["command"].endswith("hook session-end")
    # Claude Code decides when the hook runs: the edit tools, and Bash only for git commit
    edits, *commits = hooks["PreToolUse"]
    assert edits["matcher"] == "Edit|Write|MultiEdit|NotebookEdit" and "if" not in edits[
        "hooks"][0]
    assert [(g["matcher"], g["hooks"][0]["if"]) for g in commits] == [
        ("Bash", "Bash(git commit*)"), ("Bash", "Bash(git -* commit*)")]
    assert {g["hooks"][0]["command"] for g in (edits, *commits)} == {
        f"[ ! -x {link} ] || exec {link} hook pre-tool-use"}
    assert hooks["PostToolUse"] == original["hooks"]["PostToolUse"]
    assert _parse(where["claude-hooks"])["permissions"] == original["permissions"]
    _run(where, "uninstall", "claude-code")
    assert _parse(where["claude-hooks"]) == original


def test_the_installed_hook_command_runs_and_answers_in_claude_codes_form(
    where: dict[str, Path]
) -> None:
    _run(where, "install", "claude-code")
    group = _parse(where["claude-hooks"])["hooks"]["SessionStart"][1]
    env = {"HOME": str(where["home"]), "PATH": os.environ["PATH"]}
    done = subprocess.run(["sh", "-c", group["hooks"][0]["command"]], input=b'{"session_id": "s"}',
                          capture_output=True, timeout=30, cwd=where["project"], env=env)
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


def test_it_creates_a_config_that_did_not_exist(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXLAKE_HOME", str(tmp_path / "ctxlake"))
    config = tmp_path / "fresh" / "config.toml"
    home = ["--home", str(tmp_path / "home")]
    code = install.main(["--runtime", "codex", "--fleet", "f", "--agent", "a", "--config",
                         str(config), *home], command="install")
    assert code == 0 and "ctxlake" in tomllib.loads(config.read_text())["mcp_servers"]
    assert (config.parent / "hooks.json").exists()  # beside the config it was given
    install.main(["--runtime", "codex", "--config", str(config), *home], command="uninstall")
    assert not config.exists() and not (config.parent / "hooks.json").exists()  # emptied


def test_two_teammates_install_into_one_repository(
    where: dict[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 15's bar: shared files identical before and after the second install; every
    backup 0600 and outside the repository; git sees no stray files."""
    project = where["project"]
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@e", "-c", "user.name=t",
                                                  "commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=project, check=True)
    shared = [where["claude-code"], where["claude-hooks"], where["cursor"]]
    for name in ("ada", "bo"):
        monkeypatch.setenv("CTXLAKE_HOME", str(where["root"] / f"ctxlake-{name}"))
        for runtime in ("claude-code", "cursor"):
            args = ["--runtime", runtime, "--fleet", "acme", "--agent", name,
                    "--home", str(where["root"] / f"home-{name}"), "--project", str(project)]
            assert install.main(args, command="install") == 0
        if name == "ada":
            after_first = {p: p.read_bytes() for p in shared}
    out = capsys.readouterr().out
    assert {p: p.read_bytes() for p in shared} == after_first
    assert out.count(f"wrote {where['claude-code']}") == 1  # bo's install left it alone
    for name in ("ada", "bo"):
        launcher = where["root"] / f"home-{name}" / ".ctxlake" / "bin" / f"ctxlake-mcp-acme.{name}"
        assert _launcher_env(launcher)["CTXLAKE_AGENT_ID"] == name
    for text in after_first.values():
        assert b"ada" not in text and str(install.PROJECT_ROOT).encode() not in text
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                            cwd=project, capture_output=True, text=True, check=True).stdout
    assert sorted(line[3:] for line in status.splitlines()) == [
        ".claude/settings.json", ".cursor/mcp.json", ".mcp.json"]
    backups = list((where["root"] / "ctxlake-ada" / "backups").iterdir())
    assert len(backups) == 3 and not list((where["root"] / "ctxlake-bo").glob("backups/*"))
    assert {b.stat().st_mode & 0o777 for b in backups} == {0o600}


def test_backups_of_private_configs_stay_private(
    where: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    """~/.claude.json and ~/.codex/config.toml are 0600 (they can hold tokens): so are
    their backups, under $CTXLAKE_HOME/backups, whatever the umask."""
    claude = where["home"] / ".claude.json"
    claude.write_text('{"mcpServers": {"other": {"command": "x", "env": {"TOKEN": "t0k"}}}}\n')
    for path in (claude, where["codex"]):
        path.chmod(0o600)
    old = os.umask(0o022)
    try:
        assert _run(where, "install", "claude-code", "--scope", "user") == 0
        assert _run(where, "install", "codex") == 0
    finally:
        os.umask(old)
    backups = _backups(where)
    assert len(backups) == 2  # .claude.json, config.toml (~/.claude/settings.json is new)
    assert all(b.stat().st_mode & 0o777 == 0o600 for b in backups)
    assert (where["root"] / "ctxlake" / "backups").stat().st_mode & 0o777 == 0o700
    assert any("t0k" in b.read_text() for b in backups)
    assert claude.stat().st_mode & 0o777 == 0o600 and where["codex"].stat().st_mode & 0o777 == 0o600


def test_hermes_keeps_the_users_yaml_comments_and_quoting(
    where: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    original = where["hermes"].read_text()
    assert _run(where, "install", "hermes", "--dry-run") == 0
    assert where["hermes"].read_text() == original and "dry run" in capsys.readouterr().out
    assert _run(where, "install", "hermes") == 0
    text = where["hermes"].read_text()
    for kept in ("# Hermes Agent configuration", "# quoted on purpose", "# local files, "
                 "read-only", "# Memory and skills come last.", "# keep",
                 'default: "anthropic/claude-sonnet-4"', '"@modelcontextprotocol/server-github"'):
        assert kept in text
    added = [line for line in difflib.ndiff(original.splitlines(), text.splitlines())
             if line.startswith(("- ", "+ "))]
    assert all(line.startswith("+ ") for line in added)  # only lines added, none changed
    entry = _servers(where["hermes"])["ctxlake"]
    assert entry["command"] == sys.executable and entry["env"]["CTXLAKE_AGENT_ID"] == "ada"
    assert _run(where, "install", "hermes", "--agent", "ada-2") == 0
    assert _servers(where["hermes"])["ctxlake"]["env"]["CTXLAKE_AGENT_ID"] == "ada-2"
    assert _run(where, "uninstall", "hermes") == 0
    assert where["hermes"].read_text() == original


def test_hermes_refuses_a_config_it_cannot_edit_safely(
    where: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in ("model: [unclosed\n", "- a list\n- not a mapping\n", "mcp_servers: [1, 2]\n"):
        where["hermes"].write_text(bad)
        assert _run(where, "install", "hermes") == 1
        assert where["hermes"].read_text() == bad
    assert "not valid YAML" in capsys.readouterr().err


@pytest.mark.parametrize("original", [
    "",
    "model:\n  default: x   # mine\n",
    "model: x\nmcp_servers:\n# nothing yet\nmemory: {}\n",
    "mcp_servers:\n    other:\n        command: a   # four-space style\n\n# next\nmodel: x\n",
])
def test_hermes_round_trips_every_shape_of_mcp_servers(where: dict[str, Path],
                                                        original: str) -> None:
    where["hermes"].write_text(original)
    assert _run(where, "install", "hermes") == 0
    data = _parse(where["hermes"])
    assert data["mcp_servers"]["ctxlake"]["args"] == ["-m", "mcp_bridge"]
    ours = ("mcp_servers", "hooks")  # the hooks: test_hermes_hooks_go_in_beside_the_users…
    assert {k: v for k, v in data.items() if k not in ours} == {
        k: v for k, v in (yaml.safe_load(original) or {}).items() if k not in ours}
    for line in original.splitlines():
        assert line in where["hermes"].read_text().splitlines()  # every user line kept
    assert _run(where, "install", "hermes", "--agent", "ada-2") == 0  # replaced in place
    assert where["hermes"].read_text().count("ctxlake:") == 1
    assert _run(where, "uninstall", "hermes") == 0
    if not original:  # a file left empty by the uninstall is removed
        assert not where["hermes"].exists()
        return
    after = _parse(where["hermes"])
    assert "ctxlake" not in (after.get("mcp_servers") or {})
    if "other" in original:
        assert where["hermes"].read_text() == original


#: Codex's hook output schemas (openai/codex codex-rs/hooks/schema/generated/*.output):
#: additionalProperties false at both levels, so a key outside these is a broken hook.
CODEX_TOP = {"continue", "decision", "hookSpecificOutput", "reason", "stopReason",
             "suppressOutput", "systemMessage"}
CODEX_SPECIFIC = {"additionalContext", "hookEventName", "permissionDecision",
                  "permissionDecisionReason", "updatedInput", "env"}


def test_codex_gets_session_hooks_and_a_bash_pre_tool_use_hook(
    where: dict[str, Path], tmp_path: Path,
) -> None:
    from mcp_bridge import testing
    from tests.mcp_bridge.data import ahead

    assert _run(where, "install", "codex") == 0
    codex = where["home"] / ".codex"
    # Codex 0.171 runs hooks.json by default; `[features].codex_hooks` is deprecated there
    assert "features" not in tomllib.loads(where["codex"].read_text())
    hooks = json.loads((codex / "hooks.json").read_text())["hooks"]
    launcher = where["home"] / ".ctxlake" / "bin" / "ctxlake-mcp-acme.ada"
    assert set(hooks) == {"SessionStart", "SessionEnd", "PreCompact", "PreToolUse"}
    for event, sub, secs in (("SessionStart", "session-start", 10),
                             ("SessionEnd", "session-end", 3),  # Codex's cap for SessionEnd
                             ("PreCompact", "pre-compact", 10)):
        assert hooks[event] == [{"hooks": [{"type": "command", "timeout": secs,
                                            "command": f"{launcher} hook {sub}"}]}], event
    (pre,) = hooks["PreToolUse"]
    assert pre["matcher"] == "Bash" and pre["hooks"][0]["command"].endswith("pre-tool-use")

    repo = tmp_path / "repo"
    (repo / "src" / "payments").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "src" / "payments" / "api.py").write_text("x\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    testing.build_cache(where["root"] / "ctxlake" / "cache", "acme", snapshot=False, agents=[
        {"agent_id": "bo", "leases": [{"path": "src/payments/**", "reason": "refunds",
                                       "expires_at": ahead(hours=1)}]}])
    codex_input = {"cwd": str(repo), "hook_event_name": "PreToolUse", "model": "gpt-5",
                   "permission_mode": "default", "session_id": "cx-1", "tool_use_id": "t1",
                   "tool_name": "Bash", "tool_input": {"command": "git commit -m x"},
                   "transcript_path": None}
    done = subprocess.run(pre["hooks"][0]["command"].split(), input=json.dumps(codex_input),
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "HOME": str(where["home"])})
    answer = json.loads(done.stdout)
    assert set(answer) <= CODEX_TOP and set(answer["hookSpecificOutput"]) <= CODEX_SPECIFIC
    assert "leased by bo" in answer["hookSpecificOutput"]["additionalContext"]

    assert _run(where, "uninstall", "codex") == 0
    assert not (codex / "hooks.json").exists()


def _codex_session_end(command: str, home: Path, transcript: Path | None,
                       ) -> subprocess.CompletedProcess[str]:
    """The installed SessionEnd command, fed Codex's SessionEnd input (its schema in the
    0.171 binary: cwd, hook_event_name, reason "other", session_id, transcript_path or null).
    Capture is off on this host, so the session's end is spooled by the hook itself."""
    codex_input = {"cwd": str(home), "hook_event_name": "SessionEnd", "reason": "other",
                   "session_id": "cx-end-1",
                   "transcript_path": str(transcript) if transcript else None}
    return subprocess.run(command.split(), input=json.dumps(codex_input), capture_output=True,
                          text=True, timeout=30, env={"PATH": os.environ["PATH"],
                                                      "HOME": str(home), "CTXLAKE_CAPTURE": "off"})


def test_codex_session_end_records_a_rollout_with_an_exchange_and_nothing_without(
    where: dict[str, Path],
) -> None:
    """A null transcript_path (Codex's schema allows it) and no spooled write: nothing is
    recorded; a rollout holding a user and an assistant message: the session's end is."""
    from mcp_bridge import testing
    from mcp_bridge.contract import spool

    assert _run(where, "install", "codex") == 0
    testing.build_cache(where["root"] / "ctxlake" / "cache", "acme", snapshot=False)
    hooks = json.loads((where["home"] / ".codex" / "hooks.json").read_text())["hooks"]
    command = hooks["SessionEnd"][0]["hooks"][0]["command"]

    done = _codex_session_end(command, where["home"], None)
    assert done.returncode == 0 and "did nothing" in done.stderr, done.stderr
    assert spool.read_events(where["root"] / "ctxlake" / "spool", "acme") == []

    rollout = where["root"] / "rollout-2026-01-01T00-00-00-cx-end-1.jsonl"
    lines = [{"type": "session_meta", "payload": {"id": "cx-end-1", "cwd": str(where["home"])}},
             {"type": "response_item", "payload": {"type": "message", "role": "developer",
                                                   "content": [{"type": "input_text",
                                                                "text": "instructions"}]}},
             {"type": "response_item", "payload": {"type": "message", "role": "user",
                                                   "content": [{"type": "input_text",
                                                                "text": "hi"}]}}]
    rollout.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = _codex_session_end(command, where["home"], rollout)  # no assistant turn yet
    assert done.returncode == 0 and "did nothing" in done.stderr, done.stderr
    assert spool.read_events(where["root"] / "ctxlake" / "spool", "acme") == []

    lines.append({"type": "response_item", "payload": {
        "type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "hello"}]}})
    rollout.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = _codex_session_end(command, where["home"], rollout)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    [end] = spool.read_events(where["root"] / "ctxlake" / "spool", "acme")
    assert (end["kind"], end["session"], end["payload"]["reason"]) == (
        "session.end", "cx-end-1", "other")


def test_codex_keeps_the_users_own_features_table_and_flag(
    where: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    original = where["codex"].read_text() + "\n[features]\nweb_search = true\n"
    where["codex"].write_text(original)
    _run(where, "install", "codex")
    assert tomllib.loads(where["codex"].read_text())["features"] == {"web_search": True}
    _run(where, "uninstall", "codex")
    assert where["codex"].read_text() == original
    for key in ("hooks", "codex_hooks"):
        where["codex"].write_text(original.replace("web_search = true", f"{key} = false"))
        _run(where, "install", "codex")
        assert f"{key} = false" in where["codex"].read_text()  # theirs: said, not changed
        assert "Codex will not run ctxlake's hooks" in capsys.readouterr().err
        _run(where, "uninstall", "codex")


def test_codex_loses_the_deprecated_flag_an_earlier_install_wrote(
    where: dict[str, Path],
) -> None:
    """Installs before Codex 0.171 turned `[features] codex_hooks` on (marked as ours);
    the next install takes it out, and a user's own features table stays."""
    from mcp_bridge.config_files import FEATURE_MARK, FEATURE_TABLE_MARK

    original = where["codex"].read_text()
    where["codex"].write_text(original + f"\n[features]  {FEATURE_TABLE_MARK}\n"
                              f"codex_hooks = true  {FEATURE_MARK}\n")
    _run(where, "install", "codex")
    assert "codex_hooks" not in where["codex"].read_text()
    _run(where, "uninstall", "codex")
    assert where["codex"].read_text() == original


def _started(command: str, where: dict[str, Path], home_var: str) -> dict[str, str]:
    """The environment the bridge gets when a runtime starts `command` from its config:
    its home variable expanded, the link and launcher run for real, the interpreter a
    stand-in that prints its environment."""
    done = subprocess.run([command.replace(home_var, str(where["home"]))], capture_output=True,
                          text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_two_agents_of_one_fleet_on_one_machine_each_run_as_themselves(
    where: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 26: Claude Code as ada, then Cursor as ada-cursor, the docs' order. Each
    runtime's config starts its own agent, and the second install changed nothing of the
    first's; uninstalling Cursor leaves Claude Code's."""
    python = tmp_path / "python"  # what the launchers exec: prints the env it was given
    python.write_text("#!/bin/sh\nexec env\n")
    python.chmod(0o755)
    _run(where, "install", "claude-code", "--python", str(python))
    first = {p: p.read_bytes() for p in (where["home"] / ".ctxlake" / "bin").iterdir()}
    args = ["--runtime", "cursor", "--fleet", "acme", "--agent", "ada-cursor", "--python",
            str(python), "--home", str(where["home"]), "--project", str(where["project"])]
    assert install.main(args, command="install") == 0
    said = capsys.readouterr().out
    assert "ctxlake install (cursor): runs as agent ada-cursor in fleet acme; changed: " in said
    assert {p: p.read_bytes() for p in first} == first  # ada's launcher and link untouched

    claude = _servers(where["claude-code"])["ctxlake"]["command"]
    cursor = _servers(where["cursor"])["ctxlake"]["command"]
    assert _started(claude, where, "${HOME}")["CTXLAKE_AGENT_ID"] == "ada"
    assert _started(cursor, where, "${userHome}")["CTXLAKE_AGENT_ID"] == "ada-cursor"
    hook = _parse(where["claude-hooks"])["hooks"]["SessionStart"][-1]["hooks"][0]["command"]
    link = shlex.split(hook.split(" || exec ")[1])[0].replace("$HOME", str(where["home"]))
    assert _launcher_env(Path(link))["CTXLAKE_AGENT_ID"] == "ada"  # the hooks too

    assert install.main(["--runtime", "cursor", "--project", str(where["project"]),
                         "--home", str(where["home"])], command="uninstall") == 0
    assert "ctxlake" not in _servers(where["cursor"])
    assert _started(claude, where, "${HOME}")["CTXLAKE_AGENT_ID"] == "ada"


def test_uninstall_removes_the_files_it_leaves_empty_and_no_others(
    where: dict[str, Path],
) -> None:
    """A project with nothing but ctxlake: `.mcp.json`, `.claude/settings.json` and
    `.cursor/mcp.json` go with the uninstall; a file that was empty before stays."""
    for key in ("claude-code", "claude-hooks", "cursor"):
        where[key].unlink()
    (where["project"] / ".claude" / "settings.local.json").write_text("")
    for runtime in ("claude-code", "cursor"):
        _run(where, "install", runtime)
        assert where[runtime].exists()
    for runtime in ("claude-code", "cursor"):
        _run(where, "uninstall", runtime)
    assert not [where[k] for k in ("claude-code", "claude-hooks", "cursor") if where[k].exists()]
    assert (where["project"] / ".claude" / "settings.local.json").exists()


def test_a_second_agent_for_the_same_runtime_and_fleet_is_said_and_keeps_the_first(
    where: dict[str, Path], capsys: pytest.CaptureFixture[str],
) -> None:
    """A committed file cannot name an agent, so one user's Claude Code runs one agent per
    fleet: installing it as bo re-points the link, says so, and leaves ada's launcher."""
    _run(where, "install", "claude-code")
    ada = (where["home"] / ".ctxlake" / "bin" / "ctxlake-mcp-acme.ada").read_bytes()
    capsys.readouterr()
    assert install.main(["--runtime", "claude-code", "--fleet", "acme", "--agent", "bo",
                         "--home", str(where["home"]), "--project", str(where["project"])],
                        command="install") == 0
    said = capsys.readouterr().out
    assert "started agent ada's launcher; claude-code in this fleet now runs as bo" in said
    assert (where["home"] / ".ctxlake" / "bin" / "ctxlake-mcp-acme.ada").read_bytes() == ada


@pytest.mark.parametrize("agent", ["../evil", ".hidden", "a/b", "a b", "-x", "é"])
def test_it_refuses_an_agent_id_that_cannot_name_a_launcher(
    where: dict[str, Path], agent: str,
) -> None:
    with pytest.raises(SystemExit):
        install.main(["--runtime", "cursor", "--fleet", "acme", "--agent", agent,
                      "--home", str(where["home"]), "--project", str(where["project"])],
                     command="install")
    assert not (where["home"] / ".ctxlake").exists()


@pytest.mark.parametrize("runtime,scope", [("claude-code", "project"), ("claude-code", "user"),
                                           ("codex", "user")])
def test_the_pre_tool_use_hook_starts_the_fast_script_and_warns(
    where: dict[str, Path], tmp_path: Path, runtime: str, scope: str,
) -> None:
    """Issue 26: PreToolUse runs `python -I -S <checkout>/mcp_bridge/pretool.py` (directly,
    or from the launcher) and still warns about another agent's lease."""
    from mcp_bridge import testing
    from tests.mcp_bridge.data import ahead

    assert _run(where, "install", runtime, "--scope", scope) == 0
    settings = {"codex": where["home"] / ".codex" / "hooks.json",
                "claude-code": (where["home"] if scope == "user" else where["project"])
                / ".claude" / "settings.json"}[runtime]
    command = _parse(settings)["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    script = f"-I -S {install.PROJECT_ROOT / 'mcp_bridge' / 'pretool.py'}"
    launcher = where["home"] / ".ctxlake" / "bin" / "ctxlake-mcp-acme.ada"
    assert script in (command if scope == "user" and runtime == "claude-code"
                      else launcher.read_text())
    repo = tmp_path / "repo"
    (repo / "src" / "payments").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    testing.build_cache(where["root"] / "ctxlake" / "cache", "acme", snapshot=False, agents=[
        {"agent_id": "bo", "leases": [{"path": "src/payments/**", "reason": "refunds",
                                       "expires_at": ahead(hours=1)}]}])
    for path, warned in (("src/payments/api.py", True), ("src/free.py", False)):
        edit = {"cwd": str(repo), "hook_event_name": "PreToolUse", "session_id": "s",
                "tool_name": "Edit", "tool_input": {"file_path": str(repo / path)}}
        done = subprocess.run(["sh", "-c", command], input=json.dumps(edit), text=True,
                              capture_output=True, timeout=30, cwd=repo,
                              env={"PATH": os.environ["PATH"], "HOME": str(where["home"])})
        assert done.returncode == 0 and ("leased by bo" in done.stdout) == warned, done
    assert _run(where, "uninstall", runtime, "--scope", scope) == 0
    assert "pretool.py" not in (settings.read_text() if settings.exists() else "")


HERMES_USER_HOOKS = """\
model: x
hooks:
  # audit every shell command
  pre_tool_call:
    - command: "~/bin/audit.sh"   # mine
      matcher: terminal
  pre_llm_call:
      -   command: ~/bin/today.sh
hooks_auto_accept: false
"""


@pytest.mark.parametrize("original", ["", "model: x   # mine\n", "hooks:\n", HERMES_USER_HOOKS])
def test_hermes_hooks_go_in_beside_the_users_and_come_out_alone(where: dict[str, Path],
                                                                 original: str) -> None:
    """Hermes 0.19 runs `hooks:` entries as argv (no shell): ours start the launcher, the
    briefing on pre_llm_call, the capture on on_session_finalize; theirs stay as they were."""
    where["hermes"].write_text(original)
    assert _run(where, "install", "hermes") == 0
    text = where["hermes"].read_text()
    hooks = _parse(where["hermes"])["hooks"]
    launcher = where["home"] / ".ctxlake" / "bin" / "ctxlake-mcp-acme.ada"
    assert hooks["pre_llm_call"][-1] == {
        "command": f"{launcher} hook session-start --format hermes", "timeout": 10}
    assert hooks["on_session_finalize"] == [{
        "command": f"{launcher} hook session-end --format hermes", "timeout": 10}]
    assert launcher.stat().st_mode & 0o100
    for line in original.splitlines():
        if line != "hooks:":  # an empty `hooks:` gets its first entries
            assert line in text.splitlines()  # every user line kept, byte for byte
    if original == HERMES_USER_HOOKS:
        assert hooks["pre_llm_call"][0] == {"command": "~/bin/today.sh"}
        assert hooks["pre_tool_call"] == [{"command": "~/bin/audit.sh", "matcher": "terminal"}]
    assert _run(where, "install", "hermes") == 0
    assert where["hermes"].read_text() == text  # idempotent, byte for byte
    assert _run(where, "uninstall", "hermes") == 0
    if original.strip() in ("", "hooks:"):  # emptied (a bare `hooks:` holds nothing): gone
        assert not where["hermes"].exists()
    else:
        assert where["hermes"].read_text() == original


def test_hermes_reinstall_as_another_agent_replaces_its_hooks(where: dict[str, Path]) -> None:
    where["hermes"].write_text(HERMES_USER_HOOKS)
    assert _run(where, "install", "hermes") == 0
    assert _run(where, "install", "hermes", "--agent", "ada-2") == 0
    hooks = _parse(where["hermes"])["hooks"]
    commands = [h["command"] for entries in hooks.values() for h in entries]
    assert [c for c in commands if "ctxlake-mcp-" in c] == [
        f"{where['home']}/.ctxlake/bin/ctxlake-mcp-acme.ada-2 hook session-start --format "
        "hermes",
        f"{where['home']}/.ctxlake/bin/ctxlake-mcp-acme.ada-2 hook session-end --format hermes"]
    assert _run(where, "uninstall", "hermes") == 0
    assert where["hermes"].read_text() == HERMES_USER_HOOKS


def test_hermes_no_hooks_writes_only_the_server(where: dict[str, Path]) -> None:
    where["hermes"].write_text("model: x\n")
    assert _run(where, "install", "hermes", "--no-hooks") == 0
    assert "hooks" not in _parse(where["hermes"])
