"""Capture on 23 sessions of the real Claude Code and Codex CLIs, made fresh by
bench/capture_set.py (written and labelled by someone who had not read the extractors):
every excerpt a quote, no tool-name subject, trivial and dead-end sessions silent, and
precision >= 80 %, recall >= 70 %, no must-not hit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcp_bridge.test_capture_sets import check_bar, check_transcript
from tests.realclients.conftest import Clients
from tests.site.homes import ROOT

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def capture_set(clients: Clients, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("capture-set")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "capture_set.py"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_fresh_set_has_both_runtimes(capture_set: Path) -> None:
    labels = json.loads((capture_set / "labels.json").read_text())
    made = sorted(p.stem for p in (capture_set / "transcripts").glob("*.jsonl"))
    assert len(made) >= 20 and set(made) <= set(labels)
    assert sum(labels[m].get("runtime") == "codex" for m in made) >= 5


def test_every_transcript_quotes_and_names_and_keeps_quiet(capture_set: Path) -> None:
    labels = json.loads((capture_set / "labels.json").read_text())
    for path in sorted((capture_set / "transcripts").glob("*.jsonl")):
        check_transcript(path, labels.get(path.stem))


def test_precision_recall_and_no_must_not_hit(capture_set: Path) -> None:
    check_bar(capture_set, "capture-set")
