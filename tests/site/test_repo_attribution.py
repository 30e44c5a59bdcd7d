"""A fleet working on two repositories: each promoted claim reaches agents with its own."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from django.utils import timezone

from claims.models import Claim, Evidence
from ctxlake_site import workers
from fleet.models import Fleet
from mcp_bridge import contract
from mcp_bridge.contract import render
from mcp_bridge.snapshot import Snapshot


@pytest.mark.parametrize(("repo", "name"), [
    ("git@github.com:acme/shop.git", "acme/shop"),
    ("https://github.com/acme/api", "acme/api"),
    ("https://gitlab.example.com/group/sub/tool.git/", "sub/tool"),
    ("ssh://git@host:2222/acme/shop.git", "acme/shop"),
    ("/home/ada/proj", "proj"),
    ("proj", "proj"),
    ("acme/shop", "acme/shop"),  # named already: the name again
    ("", ""),
])
def test_a_repository_is_named_as_people_name_it(repo: str, name: str) -> None:
    assert render.repo_name(repo) == name


def _claim(fleet: Fleet, n: int, text: str, *repos: str) -> Claim:
    claim = Claim.objects.create(
        fleet=fleet, number=n, text=text, type="gotcha", subject="tests", scope="fleet",
        status="promoted", promoted_at=timezone.now(), independent_sessions=1,
        text_hash=f"{n:064d}")
    for i, repo in enumerate(repos or ("",)):
        Evidence.objects.create(claim=claim, session_id=f"s{n}{i}", message_id="m", repo=repo)
    return claim


def test_each_claim_carries_its_repository_to_search_and_the_briefing(
    fleet_a: Fleet, spool_dir: Path
) -> None:
    _claim(fleet_a, 1, "In this repo the tests need `make services` first.",
           "git@github.com:acme/shop.git")
    _claim(fleet_a, 2, "In this repo the tests run under tox -e py311 only.",
           "https://github.com/acme/api.git", "https://github.com/acme/api")
    _claim(fleet_a, 3, "Both repos pin Python 3.11 for the tests.",
           "git@github.com:acme/shop.git", "https://github.com/acme/api.git")
    _claim(fleet_a, 4, "The staging tests reset every Sunday night.")
    workers.render_fleet(fleet_a)
    root = spool_dir.parent / "cache" / "fleet-a"

    briefing = (root / contract.BRIEFING).read_text()
    assert "[cc-01, " in briefing and ", in acme/shop, 1 independent session" in briefing
    assert ", in acme/api, 1 independent session" in briefing  # one name for two spellings
    assert ", in acme/shop and acme/api, " in briefing
    cc04 = next(line for line in briefing.splitlines() if line.startswith("[cc-04, "))
    assert " in " not in cc04  # evidence naming no repository: no place is claimed

    snapshot = Snapshot(root / contract.SNAPSHOT, fleet="fleet-a")
    try:
        hits = snapshot.search("tests make services", k=5)
    finally:
        snapshot.close()
    first = hits.results[0]
    assert first["id"] == "cc-01" and first["repos"] == ["acme/shop"]
    assert render.attribution(first).startswith("[cc-01, ") and \
        ", in acme/shop, " in render.attribution(first)


def test_a_snapshot_rendered_before_repositories_reads_as_naming_none(
    fleet_a: Fleet, spool_dir: Path
) -> None:
    _claim(fleet_a, 1, "In this repo the tests need `make services` first.",
           "git@github.com:acme/shop.git")
    workers.render_fleet(fleet_a)
    path = spool_dir.parent / "cache" / "fleet-a" / contract.SNAPSHOT
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE claims DROP COLUMN repos")
    db.commit()
    db.close()
    snapshot = Snapshot(path, fleet="fleet-a")
    try:
        (hit,) = snapshot.search("tests make services", k=5).results
    finally:
        snapshot.close()
    assert hit["repos"] == [] and " in " not in render.attribution(hit)
