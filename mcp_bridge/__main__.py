"""`python -m mcp_bridge [serve|briefing|install|uninstall|hook|sync|guard]`.

`serve` (the default) is what agent runtimes spawn: it imports only the stdlib and
stdlib-only bridge modules; the opening exchange, tools/list and tools/call are answered
by fastpath.py, and the SDK loads in a daemon thread when a request needs it (see
transport.py and fastpath.py for why). Every other command imports only what it needs, and
never the SDK: `hook` runs inside the host's turn and has a 100 ms budget.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

from mcp_bridge.contract import LOG_LEVELS  # stdlib only: cheap for the hooks

if TYPE_CHECKING:
    from mcp_bridge.config import Config

USAGE = """\
ctxlake MCP bridge: coordination and shared memory tools for AI coding agents.

commands:
  serve      (default) serve MCP over stdio: JSON-RPC 2.0, one frame per line;
             stdout carries frames only, diagnostics go to stderr
  briefing   print the fleet's rendered briefing.md (for SessionStart hooks)
  install    register ctxlake with claude-code, cursor, codex or hermes (--help)
  uninstall  remove what install added
  hook       session-start | session-end | pre-tool-use: runtime hooks (never fail,
             never network; pre-tool-use warns before an edit in another agent's lease)
  write-rules  write the fleet's promoted claims into CLAUDE.md, AGENTS.md and
             .cursor/rules/ctxlake.mdc (opt-in per repository; --help for options)
  sync       pull the fleet's cache from a ctxlake server and push the local spool
  guard      install | uninstall | check: a git pre-commit hook that checks leases
  capture-session  --transcript PATH --session ID: spool a session's record and
             candidate claims from its transcript (what the SessionEnd hook starts)
  capture    --since 30d: capture existing Claude Code / Codex transcripts, once each
  capture-eval  DIR --labels FILE: the extractors' precision, recall and must-not hits
             on a labelled set of transcripts
  embedder   the host's shared query embedder (bridges start it on need; exits when idle)

environment:
"""

TOOLING = {"install": "install", "uninstall": "install", "hook": "hooks", "sync": "sync",
           "guard": "guard", "write-rules": "rules", "capture-session": "capture.run",
           "capture": "capture.backfill", "capture-eval": "capture.evaluate",
           "embedder": "embed_service"}
COMMANDS = ("serve", "briefing", *TOOLING)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in TOOLING:  # each module parses its own arguments
        module = importlib.import_module(f"mcp_bridge.{TOOLING[argv[0]]}")
        return int(module.main(argv[1:], command=argv[0]))
    import argparse  # here, not at the top: `hook pre-tool-use` has 50 ms, all told

    from mcp_bridge.config import ENV_HELP

    usage = USAGE + "\n".join(f"  {name:29} {text}" for name, text in ENV_HELP.items())
    parser = argparse.ArgumentParser(prog="python -m mcp_bridge", description=usage,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", nargs="?", default="serve", choices=COMMANDS)
    args = parser.parse_args(argv)
    if args.command == "briefing":
        return briefing()
    return serve()


def briefing() -> int:
    from mcp_bridge.cache import Cache
    from mcp_bridge.config import Config

    cfg = Config.from_env()
    if cfg.problems:
        sys.stdout.write("ctxlake: no briefing (" + "; ".join(cfg.problems) + ")\n")
        return 0
    text = Cache(cfg.fleet_cache, fleet=cfg.fleet).briefing()
    if text is None:
        sys.stdout.write(f"ctxlake: no briefing rendered yet for fleet {cfg.fleet!r} "
                         f"({cfg.fleet_cache / 'briefing.md'} is missing).\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0


# One thread for BLAS: a query is one matrix-vector product, and OpenBLAS' idle worker
# threads spin, burning the second core (measured: 9 ms CPU per 1 ms search on 2 cores).
_SINGLE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def serve() -> int:
    import asyncio  # here, not at the top: hooks must not pay ~45 ms for it
    import atexit
    import logging
    import signal

    # Until the loop takes over (run()), a signal means nothing is in flight: leave quietly.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: os._exit(0))
    for name in _SINGLE_THREAD:
        os.environ.setdefault(name, "1")
    raw_level = os.environ.get("CTXLAKE_LOG_LEVEL", "").strip()
    level = raw_level.upper() if raw_level.upper() in LOG_LEVELS else "WARNING"
    logging.basicConfig(stream=sys.stderr, level=level,
                        format="ctxlake-mcp %(levelname)s %(message)s")
    from mcp_bridge.config import Config

    rfile, wfd = _claim_stdio()
    if raw_level and level != raw_level.upper():  # said once, like every other bad value
        logging.getLogger("mcp_bridge").warning(
            "%s", f"CTXLAKE_LOG_LEVEL={raw_level!r} is not allowed: one of "
                  f"{', '.join(LOG_LEVELS)}; using WARNING")
    cfg = Config.from_env()
    for problem in cfg.problems:
        logging.getLogger("mcp_bridge").warning("%s", problem)
    from mcp_bridge.fastpath import FastPath
    from mcp_bridge.hook_door import HookDoor
    from mcp_bridge.transport import Transport, Worker

    door = HookDoor.open()  # this session's PreToolUse hooks, answered here (hook_door.py)
    if door is not None:
        atexit.register(door.close)

    fast = FastPath(lambda: _bridge(cfg))

    async def load_backend(emit: Any) -> Any:
        server = await Worker("ctxlake-sdk-import").submit(
            lambda: importlib.import_module("mcp_bridge.server"))
        return await server.load(emit, fast.bridge)

    async def main() -> None:
        transport = Transport(rfile, wfd, load_backend, fast=fast)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, transport.stop)
        await transport.run()

    asyncio.run(main())
    # Every request is answered (or a signal's grace is over). Leave without the
    # interpreter's teardown: with the SDK loaded it spends 0.3-0.7 s freeing modules, and
    # a daemon thread (a tool call past the grace, the SDK import) must neither hold the
    # exit nor print during it. atexit handlers (logging's flush among them) still run.
    atexit._run_exitfuncs()
    sys.stderr.flush()
    os._exit(0)


def _bridge(cfg: Config) -> Any:
    from mcp_bridge.tools import Bridge

    return Bridge.from_config(cfg)


def _claim_stdio() -> tuple[Any, int]:
    """Keep private copies of fd 0/1 for the wire; point fd 0 at /dev/null, fd 1 at stderr.

    Anything else that writes to stdout (a stray print, a C library's warning) then lands
    in the log instead of corrupting the frame stream.
    """
    wire_in, wire_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return open(wire_in, "rb", buffering=1 << 16), wire_out


if __name__ == "__main__":
    sys.exit(main())
