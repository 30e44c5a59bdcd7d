"""Config.from_env(): the bridge's environment, read once at start-up.

A bad or missing variable never stops the process: the bridge must still answer
`initialize` so the runtime can show the agent *why* its tools refuse. `problems` says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from mcp_bridge import contract
from mcp_bridge.contract import places

ENV_HELP = {
    "CTXLAKE_HOME": "root of everything local (default ~/.ctxlake)",
    "CTXLAKE_CACHE_DIR": "rendered cache, read from <dir>/<fleet>/ (default $CTXLAKE_HOME/cache)",
    "CTXLAKE_SPOOL_DIR": "write requests, appended to <dir>/mcp/<fleet>.ndjson "
    "(default $CTXLAKE_HOME/spool)",
    "CTXLAKE_FLEET_ID": "the fleet this bridge serves (required; [A-Za-z0-9_-]{1,64})",
    "CTXLAKE_AGENT_ID": "who this bridge speaks for (required)",
    "CTXLAKE_SESSION_ID": "optional: the runtime's session id, stamped on every write (else "
    "the one its SessionStart hook left in $CTXLAKE_HOME/sessions/, else one per process)",
    "CTXLAKE_SPOOL_MAX_BYTES": "total size cap of the spool's mcp/ directory (default 64 MiB)",
    "CTXLAKE_SPOOL_FILE_MAX_BYTES": "rotate a fleet's spool file past this size (default 8 MiB)",
    "CTXLAKE_MAX_FIELD_CHARS": "bound on every string a read tool returns (default 2000)",
    "CTXLAKE_LOG_LEVEL": "stderr log level: DEBUG, INFO, WARNING (default), ERROR",
    "CTXLAKE_EMBED_SHARED": "off: embed queries in this bridge process instead of asking the "
    "host's shared embedder (`python -m mcp_bridge embedder`, started on need)",
    "CTXLAKE_EMBED_IDLE_SECS": "the shared embedder exits after this many idle seconds "
    "(default 1800)",
    "CTXLAKE_CAPTURE": "off: no session capture on this host, whatever the fleet's setting",
    "CTXLAKE_LLM_API_KEY": "Anthropic API key for the LLM capture step (else ANTHROPIC_API_KEY);"
    " used only when the fleet's capture setting is candidates+llm",
    "CTXLAKE_LLM_BASE_URL": "Messages API base URL (else ANTHROPIC_BASE_URL, else "
    "https://api.anthropic.com)",
    "CTXLAKE_LLM_MODEL": "model of the LLM capture step (default claude-haiku-4-5)",
    "CTXLAKE_LLM_SESSION_TOKENS": "LLM capture: token cap per session, in and out (default "
    "20000)",
    "CTXLAKE_LLM_MONTHLY_TOKENS": "LLM capture: tokens per fleet and calendar month on this "
    "host (default 2000000)",
}

DEFAULT_SPOOL_MAX = 64 * 1024 * 1024
DEFAULT_SPOOL_FILE_MAX = 8 * 1024 * 1024
DEFAULT_FIELD_CHARS = 2000


class Config(NamedTuple):
    """Immutable. A NamedTuple, not a dataclass: `dataclasses` pulls in `inspect` and
    `ast`, ~8 ms idle (60 ms on a loaded box) that the 50 ms PreToolUse hook cannot pay."""

    cache_dir: Path
    spool_dir: Path
    fleet: str
    agent: str
    session: str | None = None
    #: Where `session` came from: "env", "runtime" (a SessionStart hook's file) or
    #: "generated" (one uuid4 for this process: still real, just not the runtime's own).
    session_source: str = "generated"
    home: Path = places.home({})  # the default root; from_env reads $CTXLAKE_HOME
    spool_max_bytes: int = DEFAULT_SPOOL_MAX
    spool_file_max_bytes: int = DEFAULT_SPOOL_FILE_MAX
    max_field_chars: int = DEFAULT_FIELD_CHARS
    problems: tuple[str, ...] = ()

    @property
    def fleet_cache(self) -> Path:
        return self.cache_dir / self.fleet

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, parent: int | None = None,
                 ) -> Config:
        """The configuration `env` states; `parent` is the pid whose runtime session to
        look up (default: this process's parent) — a bridge answering another process's
        hook (mcp_bridge.hook_door) names that process's parent."""
        env = os.environ if env is None else env
        problems: list[str] = []
        home = places.home(env)
        fleet = env.get("CTXLAKE_FLEET_ID", "").strip()
        agent = env.get("CTXLAKE_AGENT_ID", "").strip()
        if not contract.FLEET_ID_RE.fullmatch(fleet):
            problems.append("CTXLAKE_FLEET_ID is unset or not [A-Za-z0-9_-]{1,64}; set it in "
                            "the MCP server's env block")
            fleet = "_unset"
        if not agent or len(agent) > 128 or not agent.isprintable():
            problems.append("CTXLAKE_AGENT_ID is unset or invalid; set it in the MCP "
                            "server's env block")
            agent = "_unset"
        session, source = resolve_session(env, home, ppid=parent, walk=True)
        return cls(
            home=home,
            cache_dir=places.cache_dir(env),
            spool_dir=places.spool_dir(env),
            fleet=fleet,
            agent=agent,
            session=session,
            session_source=source,
            spool_max_bytes=_env_int(env, "CTXLAKE_SPOOL_MAX_BYTES", DEFAULT_SPOOL_MAX, problems),
            spool_file_max_bytes=_env_int(
                env, "CTXLAKE_SPOOL_FILE_MAX_BYTES", DEFAULT_SPOOL_FILE_MAX, problems),
            max_field_chars=_env_int(
                env, "CTXLAKE_MAX_FIELD_CHARS", DEFAULT_FIELD_CHARS, problems),
            problems=tuple(problems),
        )


    def with_runtime_session(self) -> Config:
        """This config with the runtime's session, if start-up had to generate one and the
        runtime's SessionStart hook has left its file since.

        A runtime may spawn its MCP servers while its SessionStart hook still runs (Claude
        Code does: the bridge connected 60 ms before the hook finished), so from_env at
        start-up can miss the file. The Bridge is built on the first tool call, which comes
        after the model's first turn and so after SessionStart: asking again then stamps
        every write and served record with the session the hooks and the capture know.
        """
        if self.session_source != "generated":
            return self
        session, source = resolve_session({}, self.home)
        return self._replace(session=session, session_source=source) \
            if source == "runtime" else self


def _env_int(env: Mapping[str, str], name: str, default: int, problems: list[str]) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        problems.append(f"{name}={raw!r} is not a positive integer; using {default}")
        return default
    return value


# -- sessions: every write carries a real one ------------------------------------------------

SESSIONS_SUBDIR = "sessions"
MAX_SESSION_CHARS = 128


def resolve_session(env: Mapping[str, str], home: Path, *, ppid: int | None = None,
                    walk: bool | None = None) -> tuple[str, str]:
    """(session id, source): CTXLAKE_SESSION_ID, else the id the runtime's SessionStart hook
    left for our parent process (the runtime that spawned this bridge), else a fresh uuid4.

    A generated id is still a real session: one bridge process is one runtime session in
    every runtime we install into, so its writes group together and count once. `ppid`
    names another process than our parent; `walk` (default: only for our own parent)
    looks further up its ancestors when that process left no id.
    """
    explicit = clean_session(env.get("CTXLAKE_SESSION_ID"))
    if explicit:
        return explicit, "env"
    pid = os.getppid() if ppid is None else ppid
    left = runtime_session(home, pid)
    if not left and (ppid is None if walk is None else walk) and (
            home / SESSIONS_SUBDIR).is_dir():
        walked = runtime_pid(pid)  # spawned through a shell: the runtime is further up
        left = runtime_session(home, walked) if walked != pid else None
    if left:
        return left, "runtime"
    from mcp_bridge.contract.ids import random_uuid

    return random_uuid(), "generated"


def clean_session(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    value = value.strip()[:MAX_SESSION_CHARS]
    return value if value and value.isprintable() else None


def session_file(home: Path, pid: int) -> Path:
    return home / SESSIONS_SUBDIR / f"{pid}.json"


def process_started(pid: int) -> str | None:
    """An opaque start stamp for `pid` (Linux: /proc's start time), so a file left for a
    dead process whose pid was reused is not mistaken for the new one's. None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def runtime_session(home: Path, pid: int) -> str | None:
    """The session id a hook recorded for runtime process `pid`, if it is still that process."""
    import json

    try:
        raw = json.loads(session_file(home, pid).read_bytes()[:4096])
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("pid") != pid or not _alive(pid):
        return None
    if raw.get("started") != process_started(pid):
        return None
    return clean_session(raw.get("session_id"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except PermissionError:  # someone else's: it exists
        return True
    except (OSError, OverflowError, ValueError):
        return False
    return pid > 0


SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "busybox"})


def runtime_pid(start: int | None = None) -> int:
    """The runtime that ran this hook: the nearest ancestor that is not a shell.

    Runtimes run a hook command through a shell; they spawn MCP servers directly. So
    this is the runtime the bridge finds too, walking up from its own parent.
    """
    pid = os.getppid() if start is None else start
    for _ in range(8):
        name, parent = _proc(pid)
        if name not in SHELLS or parent <= 1:
            return pid
        pid = parent
    return pid


def _proc(pid: int) -> tuple[str, int]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("utf-8", "replace")
        fields = stat[stat.rfind(")") + 2:].split()
        return stat[stat.find("(") + 1:stat.rfind(")")], int(fields[1])
    except (OSError, ValueError, IndexError):
        pass
    import subprocess

    try:  # macOS and the BSDs have no /proc
        out = subprocess.run(["ps", "-o", "ppid=,comm=", "-p", str(pid)], capture_output=True,
                             text=True, timeout=1).stdout.split(None, 1)
        return os.path.basename(out[1].strip()).lstrip("-"), int(out[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return "", 0
