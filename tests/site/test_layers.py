"""The layers of docs/architecture.md: checked by import-linter, in the suite and in CI."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_every_bridge_process_module_is_forbidden_to_the_server() -> None:
    """A new bridge module must be named in the contract, or the server could import it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    contracts = {c["id"]: c for c in config["contracts"]}
    forbidden = set(contracts["server-uses-only-contract"]["forbidden_modules"])
    modules = {
        f"mcp_bridge.{p.stem}" if p.is_file() else f"mcp_bridge.{p.name}"
        for p in (ROOT / "mcp_bridge").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }
    assert modules - forbidden == {"mcp_bridge.contract"}
    in_contract_rule = set(contracts["contract-stdlib"]["forbidden_modules"])
    assert modules - {"mcp_bridge.contract", "mcp_bridge.__main__"} <= in_contract_rule
