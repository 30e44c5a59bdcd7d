"""`install` / `uninstall`: merge ctxlake into an agent runtime's own MCP configuration.

Stdlib only. The runtime owns its config file, so this edits as little as it can: one
server entry (and, for Claude Code, its hook entries) is added, replaced or removed, and
everything else — other servers, other hooks, TOML comments — is left as it was. Every
change writes a backup first, goes through a temp file + rename, and is shown as a
unified diff; `--dry-run` shows the diff and writes nothing. Running it twice is a no-op
("no changes"), which is what makes it safe to put in a setup script.

Team-safe: project files (`.mcp.json`, `.claude/settings.json`, `.cursor/mcp.json`) are
meant to be committed, so they carry nothing personal. They name a per-user launcher,
`~/.ctxlake/bin/ctxlake-mcp-<fleet>`, through the runtime's own variable expansion; the
launcher (written here, per user) holds this machine's interpreter, checkout and agent
id. A teammate's install writes their own launcher and leaves the shared files as they
are. Backups are owner-only and live under $CTXLAKE_HOME/backups/, never in the repo.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_bridge import contract
from mcp_bridge.contract import atomic

SERVER_NAME = "ctxlake"
RUNTIMES = ("claude-code", "cursor", "codex", "hermes")
PROJECT_ROOT = Path(__file__).resolve().parents[1]
#: A hook command is ours when it runs one of these; uninstall removes exactly these.
HOOK_MARK = "-m mcp_bridge hook "
LAUNCHER_DIR = ".ctxlake/bin"  # under the user's home: a fixed place a shared file can name
LAUNCHER_MARK = f"/{LAUNCHER_DIR}/ctxlake-mcp-"
#: How each runtime spells "the user's home" in a project config it expands.
HOME_VAR = {"claude-code": "${HOME}", "cursor": "${userHome}"}
#: Claude Code hooks: event → (matcher or None, hook subcommand).
CLAUDE_HOOKS = {"SessionStart": (None, "session-start"), "SessionEnd": (None, "session-end"),
                "PreToolUse": ("Edit|Write|MultiEdit|NotebookEdit|Bash", "pre-tool-use")}
#: Codex (hooks.json, same input/output shapes as Claude Code's): no session-end event, and
#: PreToolUse sees only shell commands, so the lease check catches `git commit` there.
CODEX_HOOKS = {"SessionStart": (None, "session-start"), "PreToolUse": ("Bash", "pre-tool-use")}
HOOK_EVENTS = {"claude-code": CLAUDE_HOOKS, "codex": CODEX_HOOKS}
#: Environment passed through to the server entry when the installer's own env sets it.
PASSTHROUGH = ("CTXLAKE_HOME", "CTXLAKE_CACHE_DIR", "CTXLAKE_SPOOL_DIR")


class InstallError(Exception):
    """A config we must not touch (unparseable, or ctxlake in a shape we did not write)."""


@dataclass(frozen=True)
class Target:
    """Who and where: the entry to write and the files it goes into."""

    runtime: str
    fleet: str
    agent: str
    config: Path
    hooks: Path | None = None
    python: str = sys.executable
    env_extra: dict[str, str] = field(default_factory=dict)
    #: A committed project file: only the launcher's name goes in, nothing personal.
    shared: bool = False
    home: Path = field(default_factory=Path.home)
    strict: bool = False

    def env(self) -> dict[str, str]:
        return {"CTXLAKE_FLEET_ID": self.fleet, "CTXLAKE_AGENT_ID": self.agent,
                "PYTHONPATH": str(PROJECT_ROOT), **self.env_extra}

    @property
    def launcher(self) -> Path:
        return self.home / LAUNCHER_DIR / f"ctxlake-mcp-{self.fleet}"

    def launcher_ref(self) -> str:
        """The launcher as the shared file names it: through the runtime's home variable."""
        return f"{HOME_VAR[self.runtime]}/{LAUNCHER_DIR}/ctxlake-mcp-{self.fleet}"

    def entry(self) -> dict[str, Any]:
        if self.shared:
            return {"command": self.launcher_ref(), "args": []}
        return {"command": self.python, "args": ["-m", "mcp_bridge"], "env": self.env()}

    @property
    def needs_launcher(self) -> bool:
        return self.shared or (self.runtime == "codex" and self.hooks is not None)

    def hook_command(self, event: str) -> str:
        extra = " --strict" if self.strict and event == "pre-tool-use" else ""
        if self.shared:  # a no-op for a teammate who has not installed (no launcher)
            script = f'"$HOME/{LAUNCHER_DIR}/ctxlake-mcp-{self.fleet}"'
            return f"[ ! -x {script} ] || exec {script} hook {event}{extra}"
        if self.runtime == "codex":  # a plain argv: right whether or not a shell runs it
            return f"{shlex.quote(str(self.launcher))} hook {event}{extra}"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env().items())
        return f"{env} {shlex.quote(self.python)} {HOOK_MARK}{event}{extra}"


def launcher_script(target: Target) -> str:
    """The per-user launcher: this machine's interpreter, checkout and agent id."""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in target.env().items()
                      if k != "CTXLAKE_AGENT_ID")
    agent = shlex.quote(target.agent)
    return ("#!/bin/sh\n"
            f"# ctxlake launcher for fleet {target.fleet}: written by `python -m mcp_bridge "
            "install`, personal to this user (project configs name it, never its contents).\n"
            f"{exports}"
            f': "${{CTXLAKE_AGENT_ID:={agent}}}"\nexport CTXLAKE_AGENT_ID\n'
            f'exec {shlex.quote(target.python)} -m mcp_bridge "$@"\n')


def config_paths(runtime: str, scope: str, *, home: Path, project: Path,
                 ) -> tuple[Path, Path | None]:
    """(MCP config file, hooks settings file or None) for a runtime and scope."""
    user = scope == "user"
    if runtime == "claude-code":
        if user:
            return home / ".claude.json", home / ".claude" / "settings.json"
        return project / ".mcp.json", project / ".claude" / "settings.json"
    if runtime == "cursor":
        return (home if user else project) / ".cursor" / "mcp.json", None
    if runtime == "codex":  # Codex reads only the user config
        env_home = os.environ.get("CODEX_HOME") if home == Path.home() else None
        codex = Path(env_home or home / ".codex")
        return codex / "config.toml", codex / "hooks.json"
    if runtime == "hermes":  # so does Hermes Agent
        env_home = os.environ.get("HERMES_HOME") if home == Path.home() else None
        return Path(env_home or home / ".hermes") / "config.yaml", None
    raise InstallError(f"unknown runtime {runtime!r}; one of {', '.join(RUNTIMES)}")


# -- JSON configs (Claude Code, Cursor) ----------------------------------------------------

def _load_json(text: str, path: Path) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InstallError(f"{path} is not valid JSON ({e}); fix or move it, then retry") from e
    if not isinstance(value, dict):
        raise InstallError(f"{path} is not a JSON object; not touching it")
    return value


def _dump_json(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n" if value else ""


def json_server(text: str, path: Path, entry: dict[str, Any] | None) -> str:
    """Set (entry) or remove (None) mcpServers.ctxlake, keeping every other key in order."""
    data = _load_json(text, path)
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise InstallError(f"{path}: mcpServers is not an object; not touching it")
    if entry is None:
        if SERVER_NAME not in servers:
            return text
        servers = {k: v for k, v in servers.items() if k != SERVER_NAME}
    else:
        if servers.get(SERVER_NAME) == entry:
            return text
        servers = {**servers, SERVER_NAME: entry}
    data = {**data, "mcpServers": servers}
    if not servers:
        data.pop("mcpServers")
    return _dump_json(data)


def json_hooks(text: str, path: Path, commands: dict[str, tuple[str | None, str]] | None,
               ) -> str:
    """Set (event → (matcher, command)) or remove (None) ctxlake's Claude Code hooks."""
    data = _load_json(text, path)
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise InstallError(f"{path}: hooks is not an object; not touching it")
    new = {event: _without_ours(groups) for event, groups in hooks.items()}
    for event, (matcher, command) in (commands or {}).items():
        group: dict[str, Any] = {"matcher": matcher} if matcher else {}
        group["hooks"] = [{"type": "command", "command": command, "timeout": 10}]
        new[event] = [*new.get(event, []), group]
    new = {event: groups for event, groups in new.items() if groups}
    if new == hooks:
        return text
    data = {**data, "hooks": new}
    if not new:
        data.pop("hooks")
    return _dump_json(data)


def _our_hook(hook: Any) -> bool:
    command = str(hook.get("command")) if isinstance(hook, dict) else ""
    return HOOK_MARK in command or (LAUNCHER_MARK in command and " hook " in command)


def _without_ours(groups: Any) -> Any:
    if not isinstance(groups, list):
        return groups
    out = []
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            out.append(group)
            continue
        kept = [h for h in inner if not _our_hook(h)]
        if kept:
            out.append({**group, "hooks": kept} if len(kept) != len(inner) else group)
    return out


# -- TOML (Codex): line-level edits, so comments and layout survive --------------------------

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


def _is_ours(table: str) -> bool:
    name = table.replace('"', "").replace("'", "").replace(" ", "")
    return name == f"mcp_servers.{SERVER_NAME}" or name.startswith(f"mcp_servers.{SERVER_NAME}.")


def toml_server(text: str, path: Path, block: str | None) -> str:
    """Replace or remove the [mcp_servers.ctxlake] table (and its sub-tables), line by line.

    Comments and blank lines that trail our table but precede the next table stay with
    the next table: they are someone else's.
    """
    try:
        before = tomllib.loads(text).get("mcp_servers", {})
    except tomllib.TOMLDecodeError as e:
        raise InstallError(f"{path} is not valid TOML ({e}); fix or move it, then retry") from e
    kept, pending, ours, found = [], [], False, False
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header:
            ours = _is_ours(header.group(1))
            found = found or ours
            if not ours:
                kept += pending
            pending = []
        if not ours:
            kept.append(line)
        elif not header and (not line.strip() or line.lstrip().startswith("#")):
            pending.append(line)
        else:
            pending = []
    if SERVER_NAME in before and not found:
        raise InstallError(f"{path} defines mcp_servers.{SERVER_NAME} inline or with dotted "
                           "keys; remove it by hand and retry")
    if block is None and not found:
        return text
    body = "".join(kept).rstrip("\n")
    if block is not None:
        body = (body + "\n\n" if body else "") + block
    result = body + "\n" if body else ""
    after = tomllib.loads(result).get("mcp_servers", {})  # never write what Codex can't read
    if block is not None and after.get(SERVER_NAME) == before.get(SERVER_NAME):
        return text  # already what we would write: idempotent, byte for byte
    return result


FEATURE_MARK = "# ctxlake: Codex runs hooks.json only with this flag"
FEATURE_TABLE_MARK = "# ctxlake: added for codex_hooks"


def toml_hooks_flag(text: str, path: Path, on: bool) -> str:
    """Turn Codex's `[features] codex_hooks` on (marked lines), or take our lines out.

    A flag the user set themselves is theirs: left as it is, said when it is false.
    """
    lines = text.splitlines(keepends=True)
    ours = [i for i, line in enumerate(lines) if line.rstrip().endswith(
        (FEATURE_MARK, FEATURE_TABLE_MARK))]
    if not on:
        if not ours:
            return text
        drop = set(ours)
        first = min(ours)
        if lines[first].rstrip().endswith(FEATURE_TABLE_MARK) and first and \
                not lines[first - 1].strip():
            drop.add(first - 1)  # the blank line we put before our table
        return "".join(line for i, line in enumerate(lines) if i not in drop)
    features = tomllib.loads(text).get("features", {})
    if ours or "codex_hooks" in features:
        if features.get("codex_hooks") is False:
            sys.stderr.write(f"ctxlake install: {path} sets [features] codex_hooks = false; "
                             "Codex will not run ctxlake's hooks until it is true\n")
        return text
    flag = f"codex_hooks = true  {FEATURE_MARK}\n"
    for i, line in enumerate(lines):
        header = _HEADER.match(line)
        if header and header.group(1).replace(" ", "") == "features":
            return "".join(lines[:i + 1]) + flag + "".join(lines[i + 1:])
    if features:
        raise InstallError(f"{path} sets features with dotted keys; add codex_hooks = true "
                           "there by hand and retry")
    body = text.rstrip("\n")
    return (body + "\n\n" if body else "") + f"[features]  {FEATURE_TABLE_MARK}\n" + flag


def _toml_str(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def toml_block(entry: dict[str, Any]) -> str:
    env = ", ".join(f"{k} = {_toml_str(v)}" for k, v in entry["env"].items())
    args = ", ".join(_toml_str(a) for a in entry["args"])
    return (f"[mcp_servers.{SERVER_NAME}]\n"
            "# Written by `python -m mcp_bridge install`; `uninstall` removes this table.\n"
            f"command = {_toml_str(entry['command'])}\n"
            f"args = [{args}]\n"
            f"env = {{ {env} }}\n")


# -- YAML (Hermes Agent): located by a round-trip parser, spliced line by line ---------------

def yaml_server(text: str, path: Path, entry: dict[str, Any] | None) -> str:
    """Set (entry) or remove (None) mcp_servers.ctxlake in a Hermes config.yaml.

    ruamel.yaml (imported here only: no other command pays for it) parses the file and
    says on which lines our entry and its neighbours sit; the edit then replaces just
    those lines, so every other line — comments, quoting, the user's own indentation —
    stays byte for byte. The result is parsed again before it may be written.
    """
    data = _yaml_load(text, path)
    servers = data.get("mcp_servers") if data is not None else None
    if servers is not None and not isinstance(servers, dict):
        raise InstallError(f"{path}: mcp_servers is not a mapping; not touching it")
    current = _plain(servers.get(SERVER_NAME)) if servers else None
    if (entry is None and current is None) or (entry is not None and current == entry):
        return text
    if servers is not None and servers.fa.flow_style():
        raise InstallError(f"{path}: mcp_servers is written in flow style ({{...}}); add "
                           "ctxlake by hand or rewrite it as a block mapping, then retry")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    result = _yaml_splice(lines, data, servers, entry)
    after = _yaml_load(result, path)
    got = _plain((after or {}).get("mcp_servers") or {}).get(SERVER_NAME)
    if got != entry:  # never write what Hermes cannot read back as exactly our entry
        raise InstallError(f"{path}: could not place the ctxlake entry safely; add it by hand")
    return result


def _yaml_load(text: str, path: Path) -> Any:
    from ruamel.yaml import YAML, YAMLError

    try:
        data = YAML().load(text) if text.strip() else None
    except YAMLError as e:
        raise InstallError(f"{path} is not valid YAML ({e}); fix or move it, then retry") from e
    if data is not None and not isinstance(data, dict):
        raise InstallError(f"{path} is not a YAML mapping; not touching it")
    return data


def _yaml_splice(lines: list[str], data: Any, servers: Any,
                 entry: dict[str, Any] | None) -> str:
    if servers is None and entry is not None and (data is None or "mcp_servers" not in data):
        body = "".join(lines).rstrip("\n")
        block = _yaml_block({"mcp_servers": {SERVER_NAME: entry}}, 0)
        return (body + "\n\n" if body else "") + block
    top = list(data)
    key_line = data.lc.key("mcp_servers")[0]
    after_servers = [data.lc.key(k)[0] for k in top[top.index("mcp_servers") + 1:]]
    servers_end = _trim(lines, after_servers[0] if after_servers else len(lines))
    children = list(servers or {})
    indent = servers.lc.key(children[0])[1] if children else 2
    if SERVER_NAME in children:
        i = children.index(SERVER_NAME)
        first = servers.lc.key(SERVER_NAME)[0]
        last = (_trim(lines, servers.lc.key(children[i + 1])[0]) if i + 1 < len(children)
                else servers_end)
        if entry is None and children == [SERVER_NAME]:  # ours was the only server
            first, last = key_line, servers_end
            if first and not lines[first - 1].strip():
                first -= 1  # the blank line an install put before `mcp_servers:`
    else:
        first = last = servers_end
    new = _yaml_block({SERVER_NAME: entry}, indent) if entry is not None else ""
    return "".join(lines[:first]) + new + "".join(lines[last:])


def _trim(lines: list[str], end: int) -> int:
    """Back off trailing blank and comment lines: they belong to what follows."""
    while end > 0 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def _yaml_block(value: dict[str, Any], indent: int) -> str:
    import io

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.indent(mapping=2, sequence=4, offset=2)
    out = io.StringIO()
    yaml.dump(value, out)
    pad = " " * indent
    return "".join(pad + line if line.strip() else line
                   for line in out.getvalue().splitlines(keepends=True))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# -- applying a change ---------------------------------------------------------------------

@dataclass
class Change:
    path: Path
    before: str
    after: str | None  # None: remove the file
    mode: int = 0o600  # for a new file; an existing one keeps its own (launchers: 0700)

    @property
    def changed(self) -> bool:
        return self.before != (self.after or "") or (self.after is None and self.path.exists())

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            self.before.splitlines(keepends=True), (self.after or "").splitlines(keepends=True),
            fromfile=f"{self.path} (before)", tofile=f"{self.path} (after)"))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def plan(target: Target, *, remove: bool) -> list[Change]:
    """The file changes an install (or uninstall) of `target` would make."""
    entry = target.entry()
    edit: Callable[[str], str]
    if target.runtime == "codex":
        def edit(text: str) -> str:  # uninstall in the reverse order of install
            if remove and target.hooks is not None:
                text = toml_hooks_flag(text, target.config, on=False)
            text = toml_server(text, target.config, None if remove else toml_block(entry))
            if remove or target.hooks is None:
                return text
            return toml_hooks_flag(text, target.config, on=True)
    elif target.runtime == "hermes":
        def edit(text: str) -> str:
            return yaml_server(text, target.config, None if remove else entry)
    else:
        def edit(text: str) -> str:
            return json_server(text, target.config, None if remove else entry)
    before = _read(target.config)
    changes = [Change(target.config, before, edit(before))]
    if target.hooks is not None:
        commands = None if remove else {
            event: (matcher, target.hook_command(sub))
            for event, (matcher, sub) in HOOK_EVENTS[target.runtime].items()}
        text = _read(target.hooks)
        after = json_hooks(text, target.hooks, commands)
        if remove and not after and target.runtime == "codex":
            after = None  # Codex reads hooks.json: leave no empty file behind
        changes.append(Change(target.hooks, text, after))
    if target.needs_launcher and not remove:
        script = launcher_script(target)
        changes.append(Change(target.launcher, _read(target.launcher), script, mode=0o700))
    return changes


BACKUP_SUBDIR = "backups"


def backup_dir() -> Path:
    home = os.environ.get("CTXLAKE_HOME") or str(Path.home() / ".ctxlake")
    return Path(home).expanduser() / BACKUP_SUBDIR


def backup(path: Path, text: str, *, now: dt.datetime | None = None) -> Path:
    """Copy `text` (the old `path`) under $CTXLAKE_HOME/backups/, owner-only.

    Outside any repository (a backup of a committed file must not land untracked beside
    it), and never readable by more people than the original: 0600 at most, since a
    runtime config can hold another server's token.
    """
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%S.%fZ")
    folder = backup_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = str(path.resolve()).strip("/").replace("/", "%")
    dest = folder / f"{name}.{stamp}"
    mode = path.stat().st_mode & 0o600
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), mode)  # exactly, whatever the umask
        f.write(text)
    return dest


def write(change: Change, *, now: dt.datetime | None = None) -> Path | None:
    """Back the old file up (if any), then replace it atomically; returns the backup path."""
    path = change.path
    path.parent.mkdir(parents=True, exist_ok=True)
    mode, saved = change.mode, None
    if path.exists():
        saved = backup(path, change.before, now=now)
        mode = path.stat().st_mode & 0o777
    if change.after is None:
        path.unlink(missing_ok=True)
    else:
        atomic.write_atomic(path, change.after.encode("utf-8"), mode=mode)
    return saved


def run(target: Target, *, remove: bool, dry_run: bool, out: Any = None) -> int:
    out = out or sys.stdout
    changes = [c for c in plan(target, remove=remove) if c.changed]
    verb = "uninstall" if remove else "install"
    if not changes:
        out.write(f"ctxlake {verb} ({target.runtime}): no changes\n")
        return 0
    for change in changes:
        out.write(change.diff())
        if dry_run:
            continue
        backup = write(change)
        verb = "removed" if change.after is None else "wrote"
        out.write(f"{verb} {change.path}" + (f" (backup: {backup})" if backup else "") + "\n")
    if dry_run:
        out.write(f"dry run: nothing written ({len(changes)} file(s) would change)\n")
    return 0


# -- command line --------------------------------------------------------------------------

def main(argv: list[str], *, command: str = "install") -> int:
    import argparse

    remove = command == "uninstall"
    p = argparse.ArgumentParser(prog=f"python -m mcp_bridge {command}",
                                description=f"{command.capitalize()} ctxlake's MCP server entry "
                                "(and Claude Code's session hooks) in a runtime's own config.")
    p.add_argument("--runtime", required=True, choices=RUNTIMES)
    p.add_argument("--fleet", required=not remove, default="", help="CTXLAKE_FLEET_ID")
    p.add_argument("--agent", required=not remove, default="", help="CTXLAKE_AGENT_ID")
    p.add_argument("--scope", choices=("project", "user"), default="project",
                   help="project config (default) or the user's own (Codex, Hermes: always "
                        "user)")
    p.add_argument("--project", type=Path, default=Path.cwd(), help="project root (default: .)")
    p.add_argument("--home", type=Path, default=None, help="home directory (default: ~)")
    p.add_argument("--config", type=Path, default=None, help="the MCP config file to edit")
    p.add_argument("--hooks-config", type=Path, default=None,
                   help="Claude Code settings.json for the hooks")
    p.add_argument("--no-hooks", action="store_true", help="do not write session hooks")
    p.add_argument("--strict", action="store_true",
                   help="Claude Code: the PreToolUse hook denies (not just warns about) an "
                        "edit inside another agent's live lease")
    p.add_argument("--python", default=sys.executable, help="interpreter the runtime spawns")
    p.add_argument("--server", default=None, help="ctxlake server URL, remembered for `sync`")
    p.add_argument("--token-file", type=Path, default=None, help="file holding the API token")
    p.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    a = p.parse_args(argv)
    if not remove and not contract.FLEET_ID_RE.fullmatch(a.fleet):
        p.error("--fleet must be [A-Za-z0-9_-]{1,64}")
    home = (a.home or Path.home()).expanduser()
    config, hooks = config_paths(a.runtime, a.scope, home=home, project=a.project.resolve())
    if a.config:
        config = a.config
        if a.runtime == "codex":  # Codex reads hooks.json beside its config.toml
            hooks = a.config.parent / "hooks.json"
    if a.hooks_config:
        hooks = a.hooks_config
    shared = a.scope == "project" and a.runtime in HOME_VAR and not a.config
    target = Target(runtime=a.runtime, fleet=a.fleet, agent=a.agent, config=config,
                    hooks=None if a.no_hooks else hooks, python=str(a.python),
                    env_extra={k: os.environ[k] for k in PASSTHROUGH if os.environ.get(k)},
                    shared=shared, home=home, strict=a.strict)
    try:
        code = run(target, remove=remove, dry_run=a.dry_run)
    except (InstallError, OSError) as e:
        sys.stderr.write(f"ctxlake {command}: {e}\n")
        return 1
    if a.server and not remove:
        from mcp_bridge import sync

        where = sync.remember(a.fleet, a.server, a.token_file, dry_run=a.dry_run)
        sys.stdout.write(f"sync settings for {a.fleet}: {where}; run "
                         f"`{a.python} -m mcp_bridge sync --fleet {a.fleet} --interval 15`\n")
    return code
