"""mypy over the four packages (the settings of [tool.mypy]): in the suite and in CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~15 s with a cold .mypy_cache, about 1 s warm
def test_it_type_checks_without_errors() -> None:
    mypy = Path(sys.executable).with_name("mypy")
    run = subprocess.run([str(mypy)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert "Success: no issues found" in run.stdout
