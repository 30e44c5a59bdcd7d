"""End to end: a transcript → the capture process's spool lines → the drain → the store.

Real parts: a Claude Code-format transcript, a git work tree, the bridge's Spool writer,
the real drain and Postgres. What lands must be ordinary proposals (a person promotes)
with evidence pointing at messages that exist in that transcript, and the Session row
must carry the repo, branch, outcome and summary the transcript gave.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from claims.models import Claim, ClaimEvent
from ctxlake_site import workers
from fleet.models import Agent, DeadLetter, Fleet, Session
from mcp_bridge.capture import run
from mcp_bridge.config import Config
from tests.mcp_bridge.transcripts import failing_claude, rich_claude


def _config(spool_dir: Path, tmp_path: Path) -> Config:
    return Config.from_env({"CTXLAKE_HOME": str(tmp_path / "home"),
                            "CTXLAKE_SPOOL_DIR": str(spool_dir), "CTXLAKE_FLEET_ID": "fleet-a",
                            "CTXLAKE_AGENT_ID": "ada"})


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "remote", "add", "origin",
                    "git@github.com:acme/proj.git"], check=True)
    return root


def _uuids(path: Path) -> set[str]:
    return {json.loads(line).get("uuid") for line in path.read_text().splitlines()} - {None}


def test_captured_candidates_arrive_as_proposals_citing_real_messages(
    fleet_a: Fleet, ada: Agent, spool_dir: Path, tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    transcript = rich_claude(repo).write(tmp_path / "t.jsonl")
    done = run.capture(_config(spool_dir, tmp_path), path=str(transcript), session="cc-s1",
                       reason="prompt_input_exit")
    assert done["candidates"] == 3

    report = workers.drain_spool("fleet-a")
    assert report.applied == done["candidates"] + 1 and not DeadLetter.objects.exists()

    claims = list(Claim.objects.filter(fleet=fleet_a).prefetch_related("evidence"))
    assert len(claims) == done["candidates"]
    assert {c.status for c in claims} == {Claim.Status.PROPOSED}
    assert {c.scope for c in claims} == {Claim.Scope.AGENT}
    fix = next(c for c in claims if c.type == "gotcha")
    assert fix.subject == "setup.cfg" and fix.text == (
        "`pytest -q tests/test_slug.py` needs setup.cfg: With pythonpath set in setup.cfg the "
        "slug tests import src/slug.py.")
    cited = {(e.session_id, e.message_id) for c in claims for e in c.evidence.all()}
    ids = _uuids(transcript)
    assert {m for _, m in cited} <= ids and {s for s, _ in cited} == {"cc-s1"}
    assert {e.repo for c in claims for e in c.evidence.all()} == {"git@github.com:acme/proj.git"}
    # the review page's history names the extractor on each candidate's `proposed` event
    proposed = ClaimEvent.objects.filter(claim__in=claims, kind=ClaimEvent.Kind.PROPOSED)
    labels = {e.claim_id: (e.note, e.data) for e in proposed}
    assert labels[fix.pk] == ("candidate from a session transcript (extractor: error_fix)",
                              {"extractor": "error_fix"})
    assert sorted(d["extractor"] for _, d in labels.values()) == [
        "error_fix", "lesson", "works_here"]

    session = Session.objects.get(fleet=fleet_a, session_id="cc-s1")
    assert (session.agent, session.repo, session.branch, session.outcome) == (
        ada, "git@github.com:acme/proj.git", "fix-slugs", "success")
    assert session.summary.startswith("Asked: The slug tests fail on main")
    assert session.ended_at is not None


def test_a_failing_session_is_recorded_failed_with_its_repo(
    fleet_a: Fleet, ada: Agent, spool_dir: Path, tmp_path: Path,
) -> None:
    repo = _repo(tmp_path)
    Session.objects.create(fleet=fleet_a, agent=ada, session_id="cc-s2", repo="", branch="")
    transcript = failing_claude(repo).write(tmp_path / "t.jsonl")
    run.capture(_config(spool_dir, tmp_path), path=str(transcript), session="cc-s2")
    workers.drain_spool("fleet-a")
    session = Session.objects.get(fleet=fleet_a, session_id="cc-s2")
    assert (session.repo, session.branch, session.outcome) == (
        "git@github.com:acme/proj.git", "main", "failed")
    assert "undefined reference to frob" in session.summary
