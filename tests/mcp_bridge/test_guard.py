"""The lease-aware pre-commit hook, in a real temp git repository (which paths a lease
covers: test_glob_agreement)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mcp_bridge import guard, testing
from tests.mcp_bridge.data import ago, ahead

FLEET = "acme"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.com"],
                 ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    cache = tmp_path / "cache"
    testing.build_cache(cache, FLEET, snapshot=False, agents=[
        {"agent_id": "bo", "leases": [
            {"path": "src/payments/**", "expires_at": ahead(hours=1)},
            {"path": "old.py", "expires_at": ago(minutes=5)}]},
        {"agent_id": "ada", "leases": [{"path": "docs", "expires_at": ahead(hours=1)}]},
    ])
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(cache))
    monkeypatch.setenv("CTXLAKE_FLEET_ID", FLEET)
    monkeypatch.setenv("CTXLAKE_AGENT_ID", "ada")
    return root


def _commit(repo: Path, *paths: str) -> subprocess.CompletedProcess[str]:
    for path in paths:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("x\n")
    subprocess.run(["git", "add", *paths], cwd=repo, check=True)
    return subprocess.run(["git", "commit", "-qm", "change"], cwd=repo, capture_output=True,
                          text=True, env={**os.environ})


def test_it_warns_naming_the_holder_and_expiry_but_lets_the_commit_through(repo: Path) -> None:
    assert guard.main(["install", "--repo", str(repo)]) == 0
    done = _commit(repo, "src/payments/api.py", "docs/readme.md", "old.py")
    assert done.returncode == 0, done.stderr
    assert "src/payments/api.py is leased by bo (src/payments/**) until" in done.stderr
    assert "docs/readme.md" not in done.stderr and "old.py" not in done.stderr  # mine; expired


def test_strict_blocks_an_overlapping_commit_and_allows_a_clean_one(repo: Path) -> None:
    guard.main(["install", "--strict", "--repo", str(repo)])
    blocked = _commit(repo, "src/payments/refunds.py")
    assert blocked.returncode != 0 and "commit blocked" in blocked.stderr
    subprocess.run(["git", "reset", "-q"], cwd=repo, check=True)
    assert _commit(repo, "src/other.py").returncode == 0


def test_it_chains_an_existing_hook_and_uninstall_restores_it(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho theirs >&2\nexit 1\n")
    hook.chmod(0o755)
    guard.main(["install", "--repo", str(repo)])
    done = _commit(repo, "a.py")
    assert done.returncode == 1 and "theirs" in done.stderr  # their veto still counts
    guard.main(["install", "--repo", str(repo)])  # idempotent: theirs is not chained twice
    assert "theirs" in (hook.parent / guard.CHAINED).read_text()
    guard.main(["uninstall", "--repo", str(repo)])
    assert hook.read_text() == "#!/bin/sh\necho theirs >&2\nexit 1\n"


def test_strict_blocks_a_rename_out_of_a_leased_folder_as_it_blocks_a_removal(
    repo: Path,
) -> None:
    """Both sides of a rename are checked: moving bo's file out of src/payments/ is
    as much a change to bo's folder as deleting it."""
    (repo / "src" / "payments").mkdir(parents=True)
    (repo / "src" / "payments" / "api.py").write_text("x\n" * 20)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=repo, check=True)
    guard.main(["install", "--strict", "--repo", str(repo)])
    subprocess.run(["git", "mv", "src/payments/api.py", "moved.py"], cwd=repo, check=True)
    staged = guard.staged_paths(repo)
    assert set(staged) == {"src/payments/api.py", "moved.py"}
    moved = subprocess.run(["git", "commit", "-qm", "move"], cwd=repo, capture_output=True,
                           text=True)
    assert moved.returncode != 0 and "src/payments/api.py is leased by bo" in moved.stderr
    subprocess.run(["git", "reset", "-q", "--hard"], cwd=repo, check=True)
    subprocess.run(["git", "rm", "-q", "src/payments/api.py"], cwd=repo, check=True)
    removed = subprocess.run(["git", "commit", "-qm", "rm"], cwd=repo, capture_output=True,
                             text=True)
    assert removed.returncode != 0 and "commit blocked" in removed.stderr


@pytest.mark.parametrize("agents, says", [
    ("not a list", "agents is not a list"),
    ([{"agent_id": 7, "leases": []}], "agents[0] has no agent_id string"),
    ([{"agent_id": "bo", "leases": "src/**"}], "agents[0] has no agent_id string or no leases"),
    ([{"agent_id": "bo", "leases": [{"path": ["src"], "expires_at": ahead(hours=1)}]}],
     "bo's lease [0] has no path string"),
    ([{"agent_id": "bo", "leases": [{"path": "src/**", "expires_at": 1893456000}]}],
     "no ISO expires_at"),
])
def test_a_wrongly_typed_roster_is_said_not_read_as_empty(
    repo: Path, tmp_path: Path, agents: object, says: str,
) -> None:
    roster = tmp_path / "cache" / FLEET / "roster.json"
    data = json.loads(roster.read_text())
    roster.write_text(json.dumps({**data, "agents": agents}))
    guard.main(["install", "--strict", "--repo", str(repo)])
    done = _commit(repo, "src/payments/api.py")
    assert done.returncode == 0  # unreadable is not a reason to block, as for other states
    assert "ctxlake guard: not checking leases (roster.json: " in done.stderr
    assert says in done.stderr


def test_a_partly_readable_roster_is_checked_and_the_rest_is_said(
    repo: Path, tmp_path: Path,
) -> None:
    roster = tmp_path / "cache" / FLEET / "roster.json"
    data = json.loads(roster.read_text())
    data["agents"].append({"agent_id": "cy", "leases": [{"path": 3, "expires_at": "soon"}]})
    roster.write_text(json.dumps(data))
    guard.main(["install", "--strict", "--repo", str(repo)])
    done = _commit(repo, "src/payments/api.py")
    assert done.returncode != 0 and "leased by bo" in done.stderr
    assert "some leases could not be read (roster.json: cy's lease [0]" in done.stderr
