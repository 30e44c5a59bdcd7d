"""Config.from_env(): the bridge's environment, read once at start-up.

A bad or missing variable never stops the process: the bridge must still answer
`initialize` so the runtime can show the agent *why* its tools refuse. `problems` says.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mcp_bridge import contract

ENV_HELP = {
    "CTXLAKE_HOME": "root of everything local (default ~/.ctxlake)",
    "CTXLAKE_CACHE_DIR": "rendered cache, read from <dir>/<fleet>/ (default $CTXLAKE_HOME/cache)",
    "CTXLAKE_SPOOL_DIR": "write requests, appended to <dir>/mcp/<fleet>.ndjson "
    "(default $CTXLAKE_HOME/spool)",
    "CTXLAKE_FLEET_ID": "the fleet this bridge serves (required; [A-Za-z0-9_-]{1,64})",
    "CTXLAKE_AGENT_ID": "who this bridge speaks for (required)",
    "CTXLAKE_SESSION_ID": "optional: the runtime's session id, stamped on every write",
    "CTXLAKE_SPOOL_MAX_BYTES": "total size cap of the spool's mcp/ directory (default 64 MiB)",
    "CTXLAKE_SPOOL_FILE_MAX_BYTES": "rotate a fleet's spool file past this size (default 8 MiB)",
    "CTXLAKE_MAX_FIELD_CHARS": "bound on every string a read tool returns (default 2000)",
    "CTXLAKE_LOG_LEVEL": "stderr log level: DEBUG, INFO, WARNING (default), ERROR",
}

DEFAULT_SPOOL_MAX = 64 * 1024 * 1024
DEFAULT_SPOOL_FILE_MAX = 8 * 1024 * 1024
DEFAULT_FIELD_CHARS = 2000


@dataclass(frozen=True)
class Config:
    cache_dir: Path
    spool_dir: Path
    fleet: str
    agent: str
    session: str | None = None
    spool_max_bytes: int = DEFAULT_SPOOL_MAX
    spool_file_max_bytes: int = DEFAULT_SPOOL_FILE_MAX
    max_field_chars: int = DEFAULT_FIELD_CHARS
    problems: tuple[str, ...] = field(default=())

    @property
    def fleet_cache(self) -> Path:
        return self.cache_dir / self.fleet

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Config:
        env = os.environ if env is None else env
        problems: list[str] = []
        home = Path(env.get("CTXLAKE_HOME") or Path.home() / ".ctxlake").expanduser()
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
        return cls(
            cache_dir=Path(env.get("CTXLAKE_CACHE_DIR") or home / "cache").expanduser(),
            spool_dir=Path(env.get("CTXLAKE_SPOOL_DIR") or home / "spool").expanduser(),
            fleet=fleet,
            agent=agent,
            session=(env.get("CTXLAKE_SESSION_ID") or "").strip()[:128] or None,
            spool_max_bytes=_env_int(env, "CTXLAKE_SPOOL_MAX_BYTES", DEFAULT_SPOOL_MAX, problems),
            spool_file_max_bytes=_env_int(
                env, "CTXLAKE_SPOOL_FILE_MAX_BYTES", DEFAULT_SPOOL_FILE_MAX, problems),
            max_field_chars=_env_int(
                env, "CTXLAKE_MAX_FIELD_CHARS", DEFAULT_FIELD_CHARS, problems),
            problems=tuple(problems),
        )


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
