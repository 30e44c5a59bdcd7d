"""The docs stay true: their commands, options, env vars and tools are the code's.

Each test reads README.md or the page of docs/ that holds the text (the command table in
docs/deployment.md, the env vars in docs/configuration.md, the tool table in the README)
and the code's own declaration of the same thing — management commands and their
parsers, the `./ctxlake` and bridge `--help`, the env_* calls in settings.py, the
bridge's ENV_HELP, mcp_bridge/toolspec.py — so renaming or adding one without the docs
(or the other way round) fails here. The README stays short: what a newcomer needs, with
operators' detail linked.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from mcp_bridge import contract, rules
from mcp_bridge.__main__ import COMMANDS as BRIDGE_COMMANDS
from mcp_bridge.config import ENV_HELP
from mcp_bridge.toolspec import TOOLS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = {p: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
ALL_DOCS = "\n".join(DOCS.values())
DEPLOYMENT = ROOT / "docs" / "deployment.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
TESTS = ROOT / "docs" / "tests.md"
OUR_APPS = ("ctxlake_site", "claims", "fleet")
README_MAX_LINES = 200


def _section(title: str, doc: Path = ROOT / "README.md") -> str:
    """`doc`'s `## title` section, up to the next `## `."""
    text = DOCS[doc]
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


# -- the README itself -------------------------------------------------------------------------

def test_the_readme_fits_a_five_minute_read() -> None:
    lines = len(README.splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_the_readme_gives_the_run_and_test_commands() -> None:
    """The two commands a newcomer needs, in the quick start's shell block (.ci/run runs the
    test one)."""
    block = re.search(r"```sh\n(.*?)```", _section("Quick start"), re.S)
    assert block, "the quick start has no ```sh block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert {"./ctxlake up", "./ctxlake test"} <= set(commands)
    assert "./ctxlake test" in (ROOT / ".ci" / "run").read_text()


# -- manage.py commands ------------------------------------------------------------------------

def _documented_commands() -> dict[str, set[str]]:
    """Each `manage.py X [...]` in the command table → the options its row names."""
    rows: dict[str, set[str]] = {}
    for line in _section("Maintenance commands", DEPLOYMENT).splitlines():
        match = re.match(r"\| `manage\.py ([a-z_]+)([^`]*)`", line)
        if match:
            rows[match.group(1)] = set(re.findall(r"--[a-z][a-z-]*", match.group(2)))
    return rows


def test_every_manage_py_command_the_docs_name_exists() -> None:
    named = set(re.findall(r"`[^`\n]*?manage\.py ([a-z_]+)", ALL_DOCS))
    assert named, "the docs name no manage.py command?"
    assert named - set(get_commands()) == set()


def test_every_command_of_ours_is_in_the_command_table() -> None:
    ours = {name for name, app in get_commands().items() if app in OUR_APPS}
    assert ours - set(_documented_commands()) == set()


@pytest.mark.parametrize("command", sorted(_documented_commands()))
def test_the_options_the_table_gives_a_command_are_in_its_help(command: str) -> None:
    app = get_commands()[command]
    help_text = load_command_class(app, command).create_parser("manage.py", command).format_help()
    missing = {opt for opt in _documented_commands()[command] if opt not in help_text}
    assert missing == set(), f"manage.py {command} --help has no {missing}"


# -- ./ctxlake and python -m mcp_bridge ----------------------------------------------------------

def _help(*args: str) -> str:
    run = subprocess.run([sys.executable, *args, "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_ctxlake_subcommands_in_the_docs_exist() -> None:
    top = _help(str(ROOT / "ctxlake"))
    for sub in set(re.findall(r"\./ctxlake ([a-z]+)", ALL_DOCS)):
        assert re.search(rf"\b{sub}\b", top), f"./ctxlake has no `{sub}`"


@pytest.mark.parametrize(("doc", "title"), [(ROOT / "README.md", "Quick start"),
                                            (DEPLOYMENT, "Local: ./ctxlake up")],
                         ids=["README", "deployment"])
def test_the_options_of_ctxlake_up_the_docs_give_exist(doc: Path, title: str) -> None:
    up_help = _help(str(ROOT / "ctxlake"), "up")
    quick = _section(title, doc)
    options = set(re.findall(r"`(--[a-z][a-z-]*)", quick))
    assert options, f"{doc.name} names no option of ./ctxlake up?"
    assert {opt for opt in options if opt not in up_help} == set()
    for name in re.findall(r"\(or `(CTXLAKE_[A-Z_]+)`\)", quick):
        assert name in (ROOT / "ctxlake").read_text(), f"./ctxlake does not read {name}"


def test_bridge_subcommands_in_the_docs_exist() -> None:
    named = set(re.findall(r"python -m mcp_bridge ([a-z][a-z-]*[a-z])", ALL_DOCS))
    assert named and named - set(BRIDGE_COMMANDS) == set()
    mentioned = named | set(re.findall(r"`([a-z]+)`", ALL_DOCS))
    assert set(BRIDGE_COMMANDS) - {"serve"} - mentioned == set(), "undocumented bridge command"
    usage = _help("-m", "mcp_bridge")
    assert all(re.search(rf"^  {cmd}\b", usage, re.M) for cmd in BRIDGE_COMMANDS)


# -- environment variables ---------------------------------------------------------------------

def _settings_env_vars() -> set[str]:
    """Every variable settings.py (and object_store.py, its CTXLAKE_S3_* part) reads
    through an env_* helper, and the places module (where $CTXLAKE_HOME and the
    directories under it are resolved) reads."""
    found = set()
    for module in ("ctxlake_site/settings.py", "ctxlake_site/paths.py",
                   "ctxlake_site/object_store.py", "mcp_bridge/contract/places.py"):
        tree = ast.parse((ROOT / module).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func, first = node.func, node.args[0]
            helper = isinstance(func, ast.Name) and func.id.startswith("env_")
            environ = (isinstance(func, ast.Attribute) and func.attr == "get"
                       and ast.unparse(func.value) in ("os.environ", "_env(env)"))
            if (helper or environ) and isinstance(first, ast.Constant) \
                    and isinstance(first.value, str):
                found.add(first.value)
    return found


def _documented_env_vars() -> set[str]:
    """The first column of docs/configuration.md's table."""
    table = DOCS[CONFIGURATION]
    return {name for row in table.splitlines() if row.startswith("| `")
            for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_every_setting_read_from_the_environment_is_documented() -> None:
    read = _settings_env_vars()
    assert {"DEBUG", "DATABASE_URL", "CTXLAKE_HOME", "CTXLAKE_LOG_LEVEL"} <= read
    assert read - _documented_env_vars() == set()


def test_every_bridge_env_var_is_documented() -> None:
    assert set(ENV_HELP) - _documented_env_vars() == set()


def test_every_documented_env_var_is_read_somewhere() -> None:
    script = (ROOT / "ctxlake").read_text()
    read = _settings_env_vars() | set(ENV_HELP) | set(re.findall(r"CTXLAKE_[A-Z_]+", script))
    assert _documented_env_vars() - read == set()


# -- tools -------------------------------------------------------------------------------------

def _documented_tools() -> dict[str, list[str]]:
    tools = {}
    for line in _section("What agents talk to").splitlines():
        match = re.match(r"\| `([a-z_]+)\(([^)]*)\)` \|", line)
        if match:
            tools[match.group(1)] = [a.strip() for a in match.group(2).split(",") if a.strip()]
    return tools


def test_the_readme_tool_table_is_the_tool_list() -> None:
    assert set(_documented_tools()) == set(TOOLS)


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_each_tool_s_arguments_are_documented_as_the_schema_has_them(tool: str) -> None:
    schema = TOOLS[tool]["inputSchema"]
    documented = _documented_tools()[tool]
    names = {a.rstrip("?").removesuffix("[]") for a in documented}
    required = {a.removesuffix("[]") for a in documented if not a.endswith("?")}
    assert names == set(schema.get("properties", {}))
    assert required == set(schema.get("required", []))


# -- files the docs point at -------------------------------------------------------------------

RUNTIME_FILES = {contract.MANIFEST, contract.ROSTER, contract.HISTORY, contract.HANDOFFS,
                 contract.SNAPSHOT, contract.BRIEFING,
                 *rules.MARKDOWN_FILES}  # what `write-rules` manages in a user's repository
TRACKED = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()


def _references(doc: Path, text: str) -> list[tuple[str, Path]]:
    """(as written, where it must be) for each repository path the document names."""
    refs = []
    for target in re.findall(r"\]\(([^)#\s]+)", text):  # markdown links
        if not re.match(r"[a-z]+:", target):
            refs.append((target, (doc.parent / target).resolve()))
    for target in re.findall(r"`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+/?)`", text):
        is_file = target.endswith("/") or "." in target.rsplit("/", 1)[-1]  # not an endpoint
        if is_file and target.split("/")[0] in {p.split("/")[0] for p in TRACKED}:
            refs.append((target, ROOT / target))
    return refs


@pytest.mark.parametrize("doc", sorted(DOCS), ids=lambda p: p.name)
def test_every_repository_path_the_docs_name_exists(doc: Path) -> None:
    missing = [written for written, path in _references(doc, DOCS[doc]) if not path.exists()]
    assert missing == []


@pytest.mark.parametrize("doc", sorted(DOCS), ids=lambda p: p.name)
def test_every_python_file_the_docs_name_by_itself_exists(doc: Path) -> None:
    names = set(re.findall(r"`([A-Za-z0-9_]+\.py)`", DOCS[doc]))
    basenames = {Path(p).name for p in TRACKED}
    assert names - basenames == set()


def test_no_doc_points_at_a_design_file_that_is_not_in_the_repository() -> None:
    for doc, text in DOCS.items():
        for name in re.findall(r"\b([A-Z]+\.md)\b", text):
            if name not in RUNTIME_FILES:
                assert any(Path(p).name == name for p in TRACKED), f"{doc.name}: {name}"


@pytest.mark.parametrize("doc", [ROOT / "README.md", TESTS], ids=lambda p: p.name)
def test_the_docs_give_no_test_count(doc: Path) -> None:
    """The README gave two different ones; a count goes stale with every test added."""
    assert re.findall(r"\b\d{3,}\s+tests\b", DOCS[doc]) == []
