"""The PreToolUse hook's front door: `python -I -S <checkout>/mcp_bridge/pretool.py [--strict]`.

Why a script of its own: Claude Code and Codex spawn the hook before every edit and every
`git commit`, and issue 26 allows it at most 2x a bare `python -c pass`. `python -m
mcp_bridge hook pre-tool-use` paid ~3.5x: site, runpy, and the stdlib the contract
package pulls in (`typing`, `pathlib`, `re`, `uuid`, `datetime`). Almost every call has
nothing to say (a free path, not a commit), so this file proves that with the stdlib's
cheapest parts and leaves everything else to `hooks.pre_tool_use`, in the same process:

1. read the hook JSON with the C scanner (`_json`: the `json` package would import `re`);
2. silent when the call changes no file another agent could hold: not an edit tool, a
   Bash command that cannot be `git commit` (no "commit" in it), a file (or a commit)
   outside a git work tree, a roster in which no other agent's lease pattern covers the
   file, or a commit while no other agent holds any lease;
3. anything else (a covering lease, `git commit`, a roster it cannot read, a missing
   setting) runs the full hook, which warns, records the intrusion, or says on stderr why
   leases were not checked — the same output as before, from the same code: first asked
   of the session's running bridge, which has that code loaded (mcp_bridge.hook_door:
   `ask_bridge` below is the client), else imported and run here.

The lease rules stay where they are: globs.covers (the one glob definition) and
places.cache_dir are imported from mcp_bridge.contract without running the package's
`__init__` (its re-exports are the expensive part); the edit tools and the repository
root are defined here, and hooks.py imports them.
"""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: `typing` alone costs ~3 ms at every spawn
    from collections.abc import Mapping
    from types import ModuleType
    from typing import Any

#: Claude Code's edit tools → the input field naming the file they change.
EDIT_TOOLS = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path"}
STDIN_WAIT_SECS = 0.05  # a runtime writes its hook JSON at once; don't wait on a silent pipe
MAX_STDIN = 1 << 20
MAX_ROSTER_BYTES = 64 << 20
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_stdin(stream: Any = None, wait: float = STDIN_WAIT_SECS) -> bytes:
    """The hook's stdin, up to MAX_STDIN; b"" for a terminal or a pipe that stays silent.
    OSError when `stream` has no file descriptor."""
    import select

    fd = (sys.stdin if stream is None else stream).fileno()
    chunks: list[bytes] = []
    if os.isatty(fd):
        return b""
    deadline = time.monotonic() + wait
    while sum(map(len, chunks)) < MAX_STDIN:
        if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


class _Context:
    """What `_json.make_scanner` reads off json.JSONDecoder, without importing json."""

    strict, object_hook, object_pairs_hook = True, None, None
    parse_float, parse_int = float, int

    def __init__(self) -> None:
        self.memo: dict[str, str] = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        return float(name.lower().replace("infinity", "inf"))


def loads(raw: bytes) -> Any:
    """A JSON document (one value, whitespace around it); ValueError for anything else."""
    import _json

    text = raw.decode("utf-8").strip(" \t\r\n")
    # typeshed types the context as the scanner itself; json.decoder passes a JSONDecoder
    scan = _json.make_scanner(_Context())  # type: ignore[arg-type]
    value, end = scan(text, 0)  # StopIteration: empty or a bad first character
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


def repo_root(start: str) -> str | None:
    """The enclosing git work tree (a `.git` dir or file), found without spawning git."""
    folder = start
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def call_cwd(hook_input: dict[str, Any]) -> str:
    """The directory the tool call runs in: the hook's `cwd`, else the project's."""
    return str(hook_input.get("cwd") or os.environ.get("CLAUDE_PROJECT_DIR") or ".")


def edit_target(hook_input: dict[str, Any]) -> tuple[str, str] | None:
    """(repo root, repo-relative posix path) an edit tool call changes, or None."""
    raw = (hook_input.get("tool_input") or {}).get(EDIT_TOOLS[hook_input["tool_name"]])
    if not isinstance(raw, str) or not raw:
        return None
    cwd = call_cwd(hook_input)
    path = os.path.normpath(os.path.join(cwd, raw))
    root = repo_root(os.path.dirname(path))
    if root is None:
        return None
    return root, os.path.relpath(path, root).replace(os.sep, "/")


def contract_module(name: str) -> ModuleType:
    """mcp_bridge.contract.<name>, imported without the package's `__init__`.

    A placeholder parent (a bare module with the package's __path__) lets the import
    system find the submodule and its cached bytecode; it is taken out again, so a
    later `import mcp_bridge.contract` (the full hook) runs the real `__init__`.
    """
    if CHECKOUT not in sys.path:
        sys.path.insert(0, CHECKOUT)
    package = "mcp_bridge.contract"
    if package in sys.modules:
        return _submodule(package, name)
    stub = type(sys)(package)
    stub.__path__ = [os.path.join(CHECKOUT, "mcp_bridge", "contract")]
    sys.modules[package] = stub
    try:
        return _submodule(package, name)
    finally:
        del sys.modules[package]


def _submodule(package: str, name: str) -> ModuleType:
    __import__(f"{package}.{name}")  # the builtin: importlib itself is one more import
    return sys.modules[f"{package}.{name}"]


def roster_covers(rel: str | None, env: Mapping[str, str]) -> bool | None:
    """Whether another agent's lease pattern in the cached roster covers `rel` (any path
    at all for None: a commit's paths are known only to git); None when the roster cannot
    be read here (the full hook then says why on stderr)."""
    fleet, me = env.get("CTXLAKE_FLEET_ID"), env.get("CTXLAKE_AGENT_ID")
    if not fleet or not me or "/" in fleet or fleet.startswith("."):
        return None
    path = os.path.join(contract_module("places").cache_path(env), fleet, "roster.json")
    try:
        with open(path, "rb") as f:
            roster = loads(f.read(MAX_ROSTER_BYTES + 1))
    except (OSError, ValueError, StopIteration, RecursionError):
        return None
    agents = roster.get("agents") if isinstance(roster, dict) else None
    if not isinstance(agents, list):
        return None
    covers = contract_module("globs").covers
    for agent in agents:
        leases = agent.get("leases") if isinstance(agent, dict) else None
        if not isinstance(leases, list):
            return None
        if agent.get("agent_id") == me:
            continue
        for lease in leases:
            pattern = lease.get("path") if isinstance(lease, dict) else None
            if not isinstance(pattern, str) or rel is None or covers(pattern, rel):
                return True
    return False


def silent(hook_input: dict[str, Any]) -> bool:
    """True when the full hook would certainly print nothing (see the module docstring)."""
    tool, args = hook_input.get("tool_name"), hook_input.get("tool_input")
    if not isinstance(args, dict):
        return True
    if tool == "Bash":
        command = args.get("command")
        if not isinstance(command, str) or "commit" not in command:
            return True
        # a commit inside a work tree while another agent holds a lease: the full hook asks
        # git what is staged; with no other agent's lease there is nothing to ask about
        root = repo_root(call_cwd(hook_input))
        return root is None or roster_covers(None, os.environ) is False
    if tool not in EDIT_TOOLS:
        return True
    target = edit_target(hook_input)
    return target is None or roster_covers(target[1], os.environ) is False


def main(argv: list[str]) -> int:
    """Exit 0 whatever happens: a hook must never fail the host's turn."""
    try:
        try:
            raw = read_stdin() or b"{}"
            hook_input = loads(raw)
        except (OSError, ValueError, StopIteration, RecursionError):
            raw, hook_input = b"{}", {}
        if not isinstance(hook_input, dict):
            hook_input = {}
        if not set(argv) <= {"--strict"}:
            return full_hook(argv, hook_input)
        if silent(hook_input):
            return 0
        call_id = os.urandom(16).hex()
        if ask_bridge(argv, raw, call_cwd(hook_input), call_id):
            return 0
        return full_hook(argv, hook_input, call_id=call_id)
    except Exception as e:  # noqa: BLE001 - report, never propagate
        sys.stderr.write(f"ctxlake hook: {type(e).__name__}: {e}\n")
        return 0


def full_hook(argv: list[str], hook_input: dict[str, Any], call_id: str | None = None,
              ) -> int:
    """The whole PreToolUse hook (hooks.pre_tool_use), on the input already read."""
    if CHECKOUT not in sys.path:
        sys.path.insert(0, CHECKOUT)
    from mcp_bridge import hooks
    from mcp_bridge.config import Config

    if not set(argv) <= {"--strict"}:
        return hooks.main(["pre-tool-use", *argv])
    sys.stdout.write(hooks.pre_tool_use(Config.from_env(), hook_input,
                                        strict="--strict" in argv, call_id=call_id))
    return 0


DOOR_CONNECT_SECS = 0.25  # a listening bridge accepts at once; a stale socket refuses
DOOR_REPLY_SECS = 3.0  # then the script runs the hook itself (the call id dedups)
DOOR_PROTOCOL = 1  # what mcp_bridge.hook_door speaks (it reads these two from here)
DOOR_SUFFIX = ".sock"  # a door's file name: <bridge pid>.sock


def ask_bridge(argv: list[str], raw: bytes, cwd: str, call_id: str) -> bool:
    """Have a running bridge of this home answer the hook (mcp_bridge.hook_door); True
    when one did and its answer is written, False to run the hook here. `raw` is the
    hook JSON as read (one object), `cwd` the call's directory (call_cwd)."""
    import _json
    import _socket

    directory = contract_module("places").hook_doors(os.environ)
    try:
        doors = [name for name in os.listdir(directory) if name.endswith(DOOR_SUFFIX)]
    except OSError:
        return False
    text = _json.encode_basestring_ascii
    env = ",".join(f"{text(k)}:{text(v)}" for k, v in os.environ.items())
    request = (f'{{"v":{DOOR_PROTOCOL},"checkout":{text(CHECKOUT)},"call":"{call_id}",'
               f'"argv":[{",".join(map(text, argv))}],'
               f'"cwd":{text(os.path.abspath(cwd))},"parent":{os.getppid()},'
               f'"env":{{{env}}},"input":').encode() + raw + b"}"
    for name in doors[:8]:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(DOOR_CONNECT_SECS)
            sock.connect(os.path.join(directory, name))
            sock.settimeout(DOOR_REPLY_SECS)
            sock.sendall(request)
            sock.shutdown(_socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            reply = loads(b"".join(chunks))
        except (OSError, ValueError, StopIteration, RecursionError):
            continue  # refused (a stale socket), too slow, or no answer: the next, or here
        finally:
            sock.close()
        if isinstance(reply, dict) and isinstance(reply.get("stdout"), str) and isinstance(
                reply.get("stderr"), str):
            sys.stderr.write(reply["stderr"])
            sys.stdout.write(reply["stdout"])
            return True
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
