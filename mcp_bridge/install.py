"""`install` / `uninstall`: merge ctxlake into an agent runtime's own MCP configuration.

Stdlib only (ruamel.yaml for Hermes, lazily, in config_files). The runtime owns its config
file, so this edits as little as it can (mcp_bridge.config_files, one editor per format):
one server entry (and, for Claude Code, Codex and Hermes, its hook entries) is added, replaced or
removed, and everything else — other servers, other hooks, comments — is left as it was. Every
change writes a backup first, goes through a temp file + rename, and is shown as a
unified diff; `--dry-run` shows the diff and writes nothing. Running it twice is a no-op
("no changes"), which is what makes it safe to put in a setup script.

Team-safe: project files (`.mcp.json`, `.claude/settings.json`, `.cursor/mcp.json`) are
meant to be committed, so they carry nothing personal. They name, through the runtime's
own variable expansion, a per-user link for that runtime, `~/.ctxlake/bin/ctxlake-mcp-
<fleet>+<runtime>`, which starts one of this user's launchers. There is one launcher per
(fleet, agent), `~/.ctxlake/bin/ctxlake-mcp-<fleet>.<agent>`, holding this machine's
interpreter, checkout and agent id: installing another agent (Cursor as ada-cursor after
Claude Code as ada) writes its own launcher and never changes an existing one. A
teammate's install writes their own and leaves the shared files as they are. Backups are
owner-only and live under $CTXLAKE_HOME/backups/, never in the repo.
"""

from __future__ import annotations

import datetime as dt
import difflib
import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_bridge import contract, hooks
from mcp_bridge.config_files import (
    AGENT_FILE_RE,
    HOOK_MARK,
    LAUNCHER_DIR,
    PRETOOL_SCRIPT,
    InstallError,
    json_hooks,
    json_server,
    launcher_name,
    runtime_link_name,
    toml_block,
    toml_drop_hooks_flag,
    toml_server,
    toml_warn_hooks_off,
    yaml_hooks,
    yaml_server,
)
from mcp_bridge.contract import atomic, places

RUNTIMES = ("claude-code", "cursor", "codex", "hermes")
PROJECT_ROOT = Path(__file__).resolve().parents[1]
#: How each runtime spells "the user's home" in a project config it expands.
HOME_VAR = {"claude-code": "${HOME}", "cursor": "${userHome}"}


@dataclass(frozen=True)
class Hook:
    """One hook entry: the `hook` subcommand, and when the runtime runs it."""

    sub: str
    matcher: str | None = None  # the tool-name pattern (PreToolUse)
    rule: str | None = None  # Claude Code's `if`: a permission rule the call must match
    timeout: int = 10  # seconds

    def entry(self, command: str) -> dict[str, Any]:
        """The hook entry as Hermes' `hooks:` lists spell it."""
        return {"command": command, "timeout": self.timeout}

    def group(self, command: str) -> dict[str, Any]:
        """The hook group as Claude Code's settings.json and Codex's hooks.json spell it."""
        handler: dict[str, Any] = {"type": "command", "command": command,
                                   "timeout": self.timeout}
        if self.rule:
            handler["if"] = self.rule
        return {**({"matcher": self.matcher} if self.matcher else {}), "hooks": [handler]}


#: Claude Code hooks: event → entries. PreToolUse only for the edit tools and `git commit`.
CLAUDE_HOOKS: dict[str, tuple[Hook, ...]] = {
    "SessionStart": (Hook("session-start"),), "SessionEnd": (Hook("session-end"),),
    "PreCompact": (Hook("pre-compact"),),
    "PreToolUse": (Hook("pre-tool-use", hooks.EDIT_MATCHER),
                   *(Hook("pre-tool-use", "Bash", rule) for rule in hooks.COMMIT_RULES))}
#: Codex caps SessionEnd (and Interrupt) hooks at 3 s and warns at every start when asked
#: for more (0.171); our SessionEnd hook starts the capture detached and returns at once.
CODEX_SESSION_END_SECS = 3
#: Codex (hooks.json, same input/output shapes as Claude Code's; SessionEnd's and PreCompact's
#: `transcript_path` is its rollout file, or null). PreToolUse sees only shell commands, so
#: the lease check catches `git commit` there (Codex has no `if`: the hook checks).
CODEX_HOOKS: dict[str, tuple[Hook, ...]] = {
    "SessionStart": (Hook("session-start"),),
    "SessionEnd": (Hook("session-end", timeout=CODEX_SESSION_END_SECS),),
    "PreCompact": (Hook("pre-compact"),),
    "PreToolUse": (Hook("pre-tool-use", "Bash"),)}
#: Hermes Agent (0.19, shell hooks under `hooks:` in its config.yaml): pre_llm_call is the
#: one event whose answer reaches the model ({"context"}, and the hook briefs only the
#: first turn); on_session_finalize fires once as a session ends (exit, /new), with its
#: id, and the capture reads the session from Hermes' state.db. Hermes runs the command
#: as an argv (shlex, no shell), so it is the launcher, never `VAR=… python`.
HERMES_HOOKS: dict[str, tuple[Hook, ...]] = {
    "pre_llm_call": (Hook("session-start"),), "on_session_finalize": (Hook("session-end"),)}
HOOK_EVENTS = {"claude-code": CLAUDE_HOOKS, "codex": CODEX_HOOKS, "hermes": HERMES_HOOKS}
#: Environment passed through to the server entry when the installer's own env sets it.
PASSTHROUGH = ("CTXLAKE_HOME", "CTXLAKE_CACHE_DIR", "CTXLAKE_SPOOL_DIR")


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
        """This (fleet, agent)'s launcher; no other install writes it."""
        return self.home / LAUNCHER_DIR / launcher_name(self.fleet, self.agent)

    @property
    def link(self) -> Path:
        """This user's link for (fleet, runtime): what the shared files start."""
        return self.home / LAUNCHER_DIR / runtime_link_name(self.fleet, self.runtime)

    def launcher_ref(self) -> str:
        """The link as the shared file names it: through the runtime's home variable."""
        return f"{HOME_VAR[self.runtime]}/{LAUNCHER_DIR}/{self.link.name}"

    def entry(self) -> dict[str, Any]:
        if self.shared:
            return {"command": self.launcher_ref(), "args": []}
        return {"command": self.python, "args": ["-m", "mcp_bridge"], "env": self.env()}

    @property
    def needs_launcher(self) -> bool:
        return self.shared or (self.runtime in ("codex", "hermes") and self.hooks is not None)

    def hook_command(self, event: str) -> str:
        extra = " --strict" if self.strict and event == "pre-tool-use" else ""
        if self.shared:  # a no-op for a teammate who has not installed (no launcher)
            script = f'"$HOME/{LAUNCHER_DIR}/{self.link.name}"'
            return f"[ ! -x {script} ] || exec {script} hook {event}{extra}"
        if self.runtime == "codex":  # a plain argv: right whether or not a shell runs it
            return f"{shlex.quote(str(self.launcher))} hook {event}{extra}"
        if self.runtime == "hermes":  # an argv too (Hermes splits it; no shell runs it)
            return f"{shlex.quote(str(self.launcher))} hook {event} --format hermes"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env().items())
        if event == "pre-tool-use":
            return f"{env} {pretool_command(self.python)}{extra}"
        return f"{env} {shlex.quote(self.python)} {HOOK_MARK}{event}{extra}"


def pretool_command(python: str) -> str:
    """The PreToolUse hook without site, runpy or the package's imports (issue 26: at most
    2x `python -c pass`): `-I -S` and the script's absolute path (mcp_bridge/pretool.py)."""
    return f"{shlex.quote(python)} -I -S {shlex.quote(str(PROJECT_ROOT / PRETOOL_SCRIPT))}"


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
            # PreToolUse runs before every edit: the fast script, not `-m` (pretool.py)
            f'if [ "$1 $2" = "hook pre-tool-use" ]; then shift 2; '
            f'exec {pretool_command(target.python)} "$@"; fi\n'
            f'exec {shlex.quote(target.python)} -m mcp_bridge "$@"\n')


def link_script(target: Target) -> str:
    """The per-user link for (fleet, runtime): it starts the launcher of the agent this
    user installed that runtime as. Re-pointed (and said so) by a later install of the
    same runtime for the same fleet as another agent: the shared file cannot tell them
    apart."""
    return ("#!/bin/sh\n"
            f"# ctxlake: {target.runtime} runs fleet {target.fleet} as agent {target.agent} "
            "for this user (written by `python -m mcp_bridge install`).\n"
            f'exec {shlex.quote(str(target.launcher))} "$@"\n')


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
    if runtime == "hermes":  # so does Hermes Agent; its hooks go into the same file
        env_home = os.environ.get("HERMES_HOME") if home == Path.home() else None
        config = Path(env_home or home / ".hermes") / "config.yaml"
        return config, config
    raise InstallError(f"unknown runtime {runtime!r}; one of {', '.join(RUNTIMES)}")


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
        def edit(text: str) -> str:
            # Codex ≥ 0.171 runs hooks.json by default and calls the flag deprecated: take
            # out the one earlier installs wrote (install and uninstall alike).
            text = toml_drop_hooks_flag(text)
            if not remove and target.hooks is not None:
                toml_warn_hooks_off(text, target.config)
            return toml_server(text, target.config, None if remove else toml_block(entry))
    elif target.runtime == "hermes":
        def edit(text: str) -> str:
            return yaml_server(text, target.config, None if remove else entry)
    else:
        def edit(text: str) -> str:
            return json_server(text, target.config, None if remove else entry)
    before = _read(target.config)
    changes = [Change(target.config, before, edit(before))]
    if target.hooks is not None and target.runtime == "hermes":  # the same config.yaml
        after = changes[0].after or ""
        ours = None if remove else {
            event: [hook.entry(target.hook_command(hook.sub)) for hook in entries]
            for event, entries in HERMES_HOOKS.items()}
        changes[0] = Change(target.config, before, yaml_hooks(after, target.config, ours))
    elif target.hooks is not None:
        groups = None if remove else {
            event: [hook.group(target.hook_command(hook.sub)) for hook in entries]
            for event, entries in HOOK_EVENTS[target.runtime].items()}
        text = _read(target.hooks)
        changes.append(Change(target.hooks, text, json_hooks(text, target.hooks, groups)))
    if target.needs_launcher and not remove:
        script = launcher_script(target)
        changes.append(Change(target.launcher, _read(target.launcher), script, mode=0o700))
    if target.shared and not remove:
        changes.append(Change(target.link, _read(target.link), link_script(target), mode=0o700))
    return [_emptied(c) if remove else c for c in changes]


def _emptied(change: Change) -> Change:
    """An uninstall that leaves a file empty removes the file (`.mcp.json`, `.claude/
    settings.json`…): an empty file is still a config a runtime reads, and clutter in a
    repository. One that was empty before is not ours to remove."""
    if change.before.strip() and change.after is not None and not change.after.strip():
        return Change(change.path, change.before, None, change.mode)
    return change


BACKUP_SUBDIR = "backups"


def backup_dir() -> Path:
    return places.home() / BACKUP_SUBDIR


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
    """Write every change, then print what was done. The report waits for the writes so that
    a reader who stops early (`install … | head`) cannot leave an install half written; a
    write that fails still gets the report of those before it."""
    out = out or sys.stdout
    changes = [c for c in plan(target, remove=remove) if c.changed]
    verb = "uninstall" if remove else "install"
    if not changes:
        say(out, f"ctxlake {verb} ({target.runtime}): no changes\n")
        return 0
    report: list[str] = []
    try:
        for change in changes:
            report.append(change.diff())
            if dry_run:
                continue
            backup = write(change)
            verb = "removed" if change.after is None else "wrote"
            report.append(f"{verb} {change.path}" + (f" (backup: {backup})" if backup else "")
                          + "\n")
    finally:
        say(out, "".join(report))
    if dry_run:
        say(out, f"dry run: nothing written ({len(changes)} file(s) would change)\n")
    say(out, summary(target, changes, remove=remove, dry_run=dry_run))
    return 0


def say(out: Any, text: str) -> None:
    """Print to a reader who may have stopped reading (`install … | head -1`). Its leaving
    is no failure: every file is written before the report, so the rest of the report goes
    to no one and the command goes on (remembering `--server`, say) and exits 0. Python's
    own advice: point stdout at /dev/null, so that no later write or the flush at exit
    fails on the closed pipe."""
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        if out is sys.stdout:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


_LINK_AGENT = re.compile(r"^# ctxlake: \S+ runs fleet \S+ as agent (\S+) ", re.MULTILINE)


def summary(target: Target, changes: list[Change], *, remove: bool, dry_run: bool) -> str:
    """What this run changed, in words: which agent the runtime now runs as, each file
    changed, and a link that another agent of this fleet had (the one launcher-level
    change a second install of the same runtime makes)."""
    did = "would change" if dry_run else "changed"
    head = f"ctxlake {'uninstall' if remove else 'install'} ({target.runtime})"
    if not remove:
        head += f": runs as agent {target.agent} in fleet {target.fleet}"
    lines = [f"{head}; {did}: " + ", ".join(str(c.path) for c in changes)]
    for change in changes:
        before = _LINK_AGENT.search(change.before) if change.path == target.link else None
        if before and before.group(1) != target.agent:
            lines.append(f"note: {change.path} started agent {before.group(1)}'s launcher; "
                         f"{target.runtime} in this fleet now runs as {target.agent} in "
                         "every project of this user (their launcher is unchanged)")
    return "".join(line + "\n" for line in lines)


# -- command line --------------------------------------------------------------------------

def main(argv: list[str], *, command: str = "install") -> int:
    import argparse

    remove = command == "uninstall"
    p = argparse.ArgumentParser(prog=f"python -m mcp_bridge {command}",
                                description=f"{command.capitalize()} ctxlake's MCP server entry "
                                "(and the runtime's session hooks) in a runtime's own config.")
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
    if not remove and not AGENT_FILE_RE.fullmatch(a.agent):
        p.error("--agent must be 1-128 of A-Z a-z 0-9 _ . @ + - (not starting with . + or -): "
                "it names the agent's launcher file")
    home = (a.home or Path.home()).expanduser()
    config, hooks = config_paths(a.runtime, a.scope, home=home, project=a.project.resolve())
    if a.config:
        config = a.config
        if a.runtime == "codex":  # Codex reads hooks.json beside its config.toml
            hooks = a.config.parent / "hooks.json"
        elif a.runtime == "hermes":  # Hermes reads its hooks from the same config.yaml
            hooks = a.config
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
        say(sys.stdout, f"sync settings for {a.fleet}: {where}; run "
                        f"`{a.python} -m mcp_bridge sync --fleet {a.fleet} --interval 15`\n")
    return code
