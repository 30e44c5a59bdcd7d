"""The closing matrix of the real-client tests: client, version, outcome, test.

A plugin of the root conftest (`pytest_plugins`), not hooks in tests/realclients/conftest.py:
under pytest-xdist the controller that prints the summary collects nothing, so it never
loads a sub-folder's conftest, and the workers that run the tests print nothing. The
versions the `clients` fixture finds in a worker travel to the controller on each report
(`user_properties`), as the outcomes do.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tests.realclients import npm_clients

#: client → (its binary, its npm package); the closing summary reports their versions.
CLIENTS = {"claude-code": ("claude", "@anthropic-ai/claude-code"),
           "mcp-inspector": ("mcp-inspector", "@modelcontextprotocol/inspector"),
           "codex": ("codex", "@openai/codex"), "node": ("node", "node")}
#: test module → the client it drives, for the closing matrix.
CLIENT_OF_MODULE = {"test_claude_code": "claude-code", "test_inspector": "mcp-inspector",
                    "test_codex": "codex", "test_capture_e2e": "claude-code",
                    "test_codex_capture": "codex", "test_handoff_pickup": "claude-code",
                    "test_usefulness_claude": "claude-code", "test_hermes": "hermes"}
#: client → the version it printed (or why it does not run), filled where the tests run.
VERSIONS: dict[str, str] = {}
MATRIX: list[tuple[str, str, str, str]] = []
_VERSIONS_PROPERTY = "realclients-versions"


def _module(report: pytest.TestReport) -> str:
    return Path(report.nodeid.split("::", 1)[0]).stem


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Where the test ran: its report carries the versions found so far."""
    report = yield
    if _module(report) in CLIENT_OF_MODULE and VERSIONS:
        report.user_properties.append((_VERSIONS_PROPERTY, dict(VERSIONS)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Where the summary is printed (the controller, or the only process)."""
    module = _module(report)
    if module not in CLIENT_OF_MODULE:
        return
    for name, value in report.user_properties:
        if name == _VERSIONS_PROPERTY:
            VERSIONS.update(value)
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome, why = report.outcome, ""
        if hasattr(report, "wasxfail"):
            outcome, why = "xfail", str(report.wasxfail).removeprefix("reason: ")[:90]
        elif report.skipped and isinstance(report.longrepr, tuple):
            why = str(report.longrepr[2]).removeprefix("Skipped: ")
        MATRIX.append((CLIENT_OF_MODULE[module], report.nodeid.split("::", 1)[-1], outcome, why))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not MATRIX:
        return
    write = terminalreporter.write_line
    terminalreporter.write_sep("-", "real clients: client, version, outcome, test")
    pins = npm_clients.pinned()
    for client, (_binary, package) in CLIENTS.items():
        write(f"{client:14} {VERSIONS.get(client) or f'{pins[package]} (pinned; not run)'}")
    for client, test, outcome, why in MATRIX:
        version = VERSIONS.get(client) or f"{pins[CLIENTS[client][1]]} (pinned)"
        write(f"{client:14} {version[:24]:24} {outcome:8} {test}" + (f"  ({why})" if why else ""))
