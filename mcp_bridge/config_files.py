"""Editing a runtime's own config file, one format each, touching only ctxlake's part.

JSON (Claude Code, Cursor; Codex's hooks.json): parsed and rewritten with every other key
in order. TOML (Codex): line-level edits, so comments and layout survive. YAML (Hermes):
located by a round-trip parser, spliced line by line. Each editor returns the new text
(the same object when nothing changes) and raises InstallError rather than guess.
Used by mcp_bridge.install, which decides what goes where.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from ruamel.yaml.comments import CommentedMap

SERVER_NAME = "ctxlake"
#: A hook command is ours when it runs one of these; uninstall removes exactly these.
HOOK_MARK = "-m mcp_bridge hook "
#: The PreToolUse hook's script, relative to the checkout (install writes its absolute path).
PRETOOL_SCRIPT = "mcp_bridge/pretool.py"
LAUNCHER_DIR = ".ctxlake/bin"  # under the user's home: a fixed place a shared file can name
LAUNCHER_PREFIX = "ctxlake-mcp-"
LAUNCHER_MARK = f"/{LAUNCHER_DIR}/{LAUNCHER_PREFIX}"
#: An agent id install can name a launcher after: a file name, and never "." or "..".
#: Fleet ids have neither "." nor "+", so `<fleet>.<agent>` and `<fleet>+<runtime>` never
#: collide, whatever the agent is called.
AGENT_FILE_RE = re.compile(r"[A-Za-z0-9_@][A-Za-z0-9_.@+-]{0,127}", re.ASCII)


def launcher_name(fleet: str, agent: str) -> str:
    """The launcher of one (fleet, agent): what the agent's id and interpreter live in."""
    return f"{LAUNCHER_PREFIX}{fleet}.{agent}"


def runtime_link_name(fleet: str, runtime: str) -> str:
    """What a committed project file names for one runtime: it holds nothing personal, so
    each user's link says which of their launchers that runtime starts."""
    return f"{LAUNCHER_PREFIX}{fleet}+{runtime}"


class InstallError(Exception):
    """A config we must not touch (unparseable, or ctxlake in a shape we did not write)."""


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


def json_hooks(text: str, path: Path, groups: dict[str, list[dict[str, Any]]] | None) -> str:
    """Set (event → hook groups) or remove (None) ctxlake's hooks (Claude Code, Codex)."""
    data = _load_json(text, path)
    hooks = data.get("hooks", {})
    if not isinstance(hooks, dict):
        raise InstallError(f"{path}: hooks is not an object; not touching it")
    new = {event: _without_ours(groups) for event, groups in hooks.items()}
    for event, ours in (groups or {}).items():
        new[event] = [*new.get(event, []), *ours]
    new = {event: groups for event, groups in new.items() if groups}
    if new == hooks:
        return text
    data = {**data, "hooks": new}
    if not new:
        data.pop("hooks")
    return _dump_json(data)


def _our_hook(hook: Any) -> bool:
    command = str(hook.get("command")) if isinstance(hook, dict) else ""
    return HOOK_MARK in command or f"/{PRETOOL_SCRIPT}" in command or (
        LAUNCHER_MARK in command and " hook " in command)


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
    pending: list[str]
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


def toml_drop_hooks_flag(text: str) -> str:
    """Take out the `[features] codex_hooks = true` lines earlier installs wrote (marked):
    Codex 0.171 runs hooks.json by default and warns that the key is deprecated."""
    lines = text.splitlines(keepends=True)
    ours = [i for i, line in enumerate(lines) if line.rstrip().endswith(
        (FEATURE_MARK, FEATURE_TABLE_MARK))]
    if not ours:
        return text
    drop = set(ours)
    first = min(ours)
    if lines[first].rstrip().endswith(FEATURE_TABLE_MARK) and first and \
            not lines[first - 1].strip():
        drop.add(first - 1)  # the blank line we put before our table
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def toml_warn_hooks_off(text: str, path: Path) -> None:
    """Say so when the user turned Codex's hooks off themselves (theirs: never changed)."""
    features = tomllib.loads(text).get("features", {})
    off = [key for key in ("hooks", "codex_hooks") if features.get(key) is False]
    if off:
        sys.stderr.write(f"ctxlake install: {path} sets [features] {off[0]} = false; "
                         "Codex will not run ctxlake's hooks until it is true\n")


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
    if servers is not None and cast("CommentedMap", servers).fa.flow_style():
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
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError  # the same class; its stubs lack the re-export

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
    yaml.width = 4096  # a long command stays one line (folded, it ends in a trailing blank)
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


def yaml_hooks(text: str, path: Path, hooks: dict[str, list[dict[str, Any]]] | None) -> str:
    """Set (event → our entries) or remove (None) ctxlake's entries under Hermes' `hooks:`.

    Like yaml_server, line splices located by ruamel.yaml, one at a time (each re-parses, so
    line numbers are never stale): first every entry of ours is taken out, with the event
    list (and the `hooks:` key) it leaves empty; then ours go in at the end of each event's
    list. Other hooks and every comment stay byte for byte; a run that would change nothing
    returns `text` itself.
    """
    data = _yaml_load(text, path)
    if hooks is not None and _yaml_our_hooks(data, path) == hooks:
        return text
    lines = _yaml_lines(text)
    while (spot := _yaml_next_ours(data, path)) is not None:
        lines = _yaml_cut(lines, data, *spot)
        data = _yaml_load("".join(lines), path)
    for event, entries in (hooks or {}).items():
        lines = _yaml_lines("".join(_yaml_add(lines, data, event, entries)))
        data = _yaml_load("".join(lines), path)
    result = "".join(lines)
    if hooks is not None and _yaml_our_hooks(data, path) != hooks:
        raise InstallError(f"{path}: could not place ctxlake's hooks safely; add them by hand")
    return result


def _yaml_lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines


def _yaml_hooks_map(data: Any, path: Path) -> Any:
    """The `hooks:` mapping (None when absent or empty); refuses shapes it cannot edit."""
    hooks = data.get("hooks") if data is not None else None
    if hooks is None:
        return None
    if not isinstance(hooks, dict) or cast("CommentedMap", hooks).fa.flow_style():
        raise InstallError(f"{path}: hooks is not a block mapping; add ctxlake's hooks by hand")
    return hooks


def _yaml_our_hooks(data: Any, path: Path) -> dict[str, list[dict[str, Any]]]:
    """Event → our entries, as plain values (what an install compares with its own)."""
    hooks = _yaml_hooks_map(data, path) or {}
    found = {str(event): [_plain(e) for e in entries if _our_hook(e)]
             for event, entries in hooks.items() if isinstance(entries, list)}
    return {event: entries for event, entries in found.items() if entries}


def _yaml_next_ours(data: Any, path: Path) -> tuple[str, int] | None:
    for event, entries in (_yaml_hooks_map(data, path) or {}).items():
        if isinstance(entries, list):
            for i, entry in enumerate(entries):
                if _our_hook(entry) and cast("CommentedMap", entries).fa.flow_style():
                    raise InstallError(f"{path}: hooks.{event} is in flow style; edit it by hand")
                if _our_hook(entry):
                    return str(event), i
    return None


def _yaml_end(lines: list[str], default: int, parent: Any, key: Any) -> int:
    """The line after `parent[key]`'s block: where its next sibling (or the parent's own
    next sibling) starts, less the blank and comment lines before that."""
    keys = list(parent)
    i = keys.index(key)
    if i + 1 < len(keys):
        return _trim(lines, int(parent.lc.key(keys[i + 1])[0]))
    return default


def _yaml_block_end(lines: list[str], data: Any, key: str) -> int:
    """The end of top-level `key`'s block."""
    return _yaml_end(lines, _trim(lines, len(lines)), data, key)


def _yaml_cut(lines: list[str], data: Any, event: str, index: int) -> list[str]:
    """`lines` without hooks[event][index]; without the event (and `hooks:`) it empties."""
    hooks = data["hooks"]
    entries = hooks[event]
    hooks_end = _yaml_block_end(lines, data, "hooks")
    event_end = _yaml_end(lines, hooks_end, hooks, event)
    if len(entries) > 1:
        first = entries.lc.item(index)[0]
        last = (_trim(lines, entries.lc.item(index + 1)[0]) if index + 1 < len(entries)
                else event_end)
    elif len(hooks) > 1:
        first, last = hooks.lc.key(event)[0], event_end
    else:  # ours was the only hook: `hooks:` goes, with the blank line an install put before
        first, last = data.lc.key("hooks")[0], hooks_end
        if first and not lines[first - 1].strip():
            first -= 1
    return lines[:first] + lines[last:]


def _yaml_add(lines: list[str], data: Any, event: str,
              entries: list[dict[str, Any]]) -> list[str]:
    """Pieces of the text with `entries` at the end of hooks[event] (made if absent)."""
    hooks = data.get("hooks") if data is not None else None
    if hooks is None:
        if data is not None and "hooks" in data:  # `hooks:` with nothing under it
            at = data.lc.key("hooks")[0]
            return lines[:at] + [_yaml_block({"hooks": {event: entries}}, 0)] + lines[at + 1:]
        body = "".join(lines).rstrip("\n")
        return [(body + "\n\n" if body else ""), _yaml_block({"hooks": {event: entries}}, 0)]
    hooks_end = _yaml_block_end(lines, data, "hooks")
    key_col = hooks.lc.key(next(iter(hooks)))[1]
    current = hooks.get(event)
    if event not in hooks:
        return lines[:hooks_end] + [_yaml_block({event: entries}, key_col)] + lines[hooks_end:]
    if current is None:  # `pre_llm_call:` with nothing under it
        at = hooks.lc.key(event)[0]
        return lines[:at] + [_yaml_block({event: entries}, key_col)] + lines[at + 1:]
    if not isinstance(current, list) or cast("CommentedMap", current).fa.flow_style():
        raise InstallError(f"hooks.{event} is not a block list; add ctxlake's hook by hand")
    end = _yaml_end(lines, hooks_end, hooks, event)
    if current:
        line, col = cast("CommentedMap", current).lc.item(0)
        dash = lines[line].rindex("-", 0, col)
    else:
        dash = key_col + 2
    return lines[:end] + [_yaml_items(entries, dash)] + lines[end:]


def _yaml_items(entries: list[dict[str, Any]], dash: int) -> str:
    """List items whose dash sits at column `dash`."""
    import io

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.indent(mapping=2, sequence=2, offset=0)
    yaml.width = 4096
    out = io.StringIO()
    yaml.dump(entries, out)
    return "".join(" " * dash + line for line in out.getvalue().splitlines(keepends=True))
