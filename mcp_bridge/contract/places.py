"""Where ctxlake keeps its local state: one root, everything else derived from it.

The one definition of `$CTXLAKE_HOME` and the directories under it, for the server
(settings, the embedded database, `./ctxlake up`) and the bridge (config, sync, install)
alike: a bridge and a server on one host must agree on the spool and cache they share.
Stdlib only, so the start-up script can use it before a virtual environment exists.
Each function reads the environment when called (tests and `./ctxlake` set it late);
`env` lets the bridge's Config resolve from the mapping it was given.
"""

from __future__ import annotations

import os

# pathlib and collections.abc cost the PreToolUse script (mcp_bridge/pretool.py) ~8 ms at
# every spawn: it asks cache_path() for a str; everything else imports pathlib anyway.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

DEFAULT_HOME = "~/.ctxlake"
RUN_SUBDIR = "run"  # $CTXLAKE_HOME/run: the local services' sockets (embedder, hook doors)


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def home(env: Mapping[str, str] | None = None) -> Path:
    """$CTXLAKE_HOME, else ~/.ctxlake."""
    from pathlib import Path

    return Path(_env(env).get("CTXLAKE_HOME") or DEFAULT_HOME).expanduser()


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """$CTXLAKE_CACHE_DIR, else $CTXLAKE_HOME/cache: the rendered per-fleet caches."""
    from pathlib import Path

    return Path(cache_path(env))


def cache_path(env: Mapping[str, str] | None = None) -> str:
    """cache_dir() as a str, without importing pathlib."""
    explicit = _env(env).get("CTXLAKE_CACHE_DIR")
    return os.path.expanduser(explicit or os.path.join(home_path(env), "cache"))


def home_path(env: Mapping[str, str] | None = None) -> str:
    """home() as a str, without importing pathlib."""
    return os.path.expanduser(_env(env).get("CTXLAKE_HOME") or DEFAULT_HOME)


def hook_doors(env: Mapping[str, str] | None = None) -> str:
    """$CTXLAKE_HOME/run/hooks: where each running bridge listens for the PreToolUse
    script (mcp_bridge.hook_door), one socket per bridge process."""
    return os.path.join(home_path(env), RUN_SUBDIR, "hooks")


def spool_dir(env: Mapping[str, str] | None = None) -> Path:
    """$CTXLAKE_SPOOL_DIR, else $CTXLAKE_HOME/spool: the agents' write spools."""
    from pathlib import Path

    return Path(_env(env).get("CTXLAKE_SPOOL_DIR") or home(env) / "spool").expanduser()
