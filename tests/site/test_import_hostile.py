"""Hostile import files: each is refused with its file and line named, and nothing written.

Each case starts from a real export and breaks one line. Unless the case is about the
manifest, the manifest is made to agree (sha256 and count), so that the line-level checks
are what refuse it.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from claims.models import Claim, ClaimEvent, Evidence
from ctxlake_site.fleet_export import layout
from fleet.models import Activity, Agent, Fleet, Handoff, Session
from tests.site.export_world import build_world, export_to, import_, tamper

Edit = Callable[[bytes], bytes]


def _line(n: int, change: Callable[[dict[str, Any]], Any]) -> Edit:
    """Replace line n (1-based) of a JSONL file by what `change` makes of its row: a dict
    (dumped as JSON) or bytes (written as they are)."""
    def edit(data: bytes) -> bytes:
        lines = data.split(b"\n")
        new = change(json.loads(lines[n - 1]))
        lines[n - 1] = new if isinstance(new, bytes) else json.dumps(new).encode()
        return b"\n".join(lines)
    return edit


def _raw(row: dict[str, Any], key: str, raw: bytes) -> bytes:
    """The row as JSON with `key`'s value spliced in as raw bytes."""
    marker = "@@RAW@@"
    return json.dumps({**row, key: marker}).encode().replace(f'"{marker}"'.encode(), raw)


def _nested(depth: int) -> Edit:
    return _line(1, lambda r: _raw(r, "data", b'{"x":' + b"[" * depth + b"]" * depth + b"}"))


def _duplicate_second_claim(data: bytes) -> bytes:
    lines = data.split(b"\n")
    return b"\n".join([*lines[:2], lines[1], *lines[2:]])


CASES: list[tuple[str, str, Edit, str, str]] = [
    # (case, file, edit, where it must name, why)
    ("raw NUL byte", layout.CLAIMS, _line(2, lambda r: _raw(r, "text", b'"a\x00b"')),
     "claims.jsonl line 2", "not valid JSON"),
    ("escaped NUL", layout.CLAIMS, _line(2, lambda r: {**r, "text": "a\x00b"}),
     "claims.jsonl line 2", "NUL"),
    ("invalid UTF-8", layout.SESSIONS, _line(1, lambda r: _raw(r, "summary", b'"caf\xe9"')),
     "sessions.jsonl line 1", "not valid UTF-8"),
    ("deep JSON", layout.EVENTS, _nested(5000), "claim_events.jsonl line 1", "nested deeper"),
    ("huge float", layout.CLAIMS, _line(3, lambda r: _raw(r, "confidence", b"1e999")),
     "claims.jsonl line 3", "finite number"),
    ("huge integer", layout.FLEET,
     _line(1, lambda r: {**r, "capture_max_candidates": 10**30}), "fleet.jsonl line 1",
     "capture_max_candidates must be from"),
    ("integer past Python's digit limit", layout.HANDOFFS,
     _line(1, lambda r: _raw(r, "ref", b"9" * 5000)), "handoffs.jsonl line 1",
     "not valid JSON"),
    ("wrong type", layout.CLAIMS, _line(1, lambda r: {**r, "contested": "yes"}),
     "claims.jsonl line 1", "contested must be true or false"),
    ("wrong type in a citation", layout.EVIDENCE, _line(1, lambda r: {**r, "message_id": 7}),
     "evidence.jsonl line 1", "message_id must be a string"),
    ("unknown key", layout.AGENTS, _line(1, lambda r: {**r, "password": "x"}),
     "agents.jsonl line 1", "unknown key(s) ['password']"),
    ("duplicate claim id", layout.CLAIMS, _duplicate_second_claim, "claims.jsonl line 3",
     "duplicate claim id 'cc-02' (first on line 2)"),
    ("duplicate agent id", layout.AGENTS, _line(2, lambda r: {**r, "agent_id": "ada"}),
     "agents.jsonl line 2", "duplicate agent_id"),
    ("lone surrogate", layout.CLAIMS, _line(1, lambda r: _raw(r, "text", b'"a\\ud800b"')),
     "claims.jsonl line 1", "lone surrogate"),
    ("oversized line", layout.HANDOFFS,
     _line(1, lambda r: {**r, "summary": "x" * (layout.MAX_LINE_BYTES + 1)}),
     "handoffs.jsonl line 1", "bytes; a line may hold"),
    ("over a field's limit", layout.CLAIMS, _line(1, lambda r: {**r, "text": "x" * 2001}),
     "claims.jsonl line 1", "the limit is 2000"),
    ("truncated file", layout.EVENTS, lambda b: b[: len(b) - 20], "claim_events.jsonl line",
     "the file is truncated"),
    ("promoted without a recorded promotion", layout.CLAIMS,
     _line(1, lambda r: {**r, "status": "promoted", "scope": "fleet",
                         "promoted_at": r["created_at"]}),
     "claims.jsonl line 1", "records no promotion"),
    ("reference to nothing", layout.EVIDENCE, _line(1, lambda r: {**r, "claim": "cc-99"}),
     "evidence.jsonl line 1", "the export does not hold"),
    ("session count out of range", layout.CLAIMS,
     _line(1, lambda r: {**r, "independent_sessions": 10**12}), "claims.jsonl line 1",
     "independent_sessions must be from"),
]


def _counts() -> dict[str, int]:
    models: list[Any] = [Fleet, Agent, Session, Handoff, Claim, Evidence, ClaimEvent, Activity]
    return {m.__name__: m.objects.count() for m in models}


@pytest.fixture
def export(fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, tmp_path: Path) -> Path:
    build_world(fleet_a, ada, bo, mod)
    return export_to("fleet-a", tmp_path / "export")


@pytest.mark.django_db
@pytest.mark.parametrize(("file", "edit", "where", "why"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_it_refuses_a_hostile_line_naming_file_and_line(
    export: Path, file: str, edit: Edit, where: str, why: str
) -> None:
    tamper(export, file, edit)
    before = _counts()

    with pytest.raises(CommandError) as refused:
        import_(export, "--fleet", "fleet-copy")

    assert where in str(refused.value) and why in str(refused.value)
    assert "nothing written" in str(refused.value)
    assert _counts() == before


@pytest.mark.django_db
def test_it_refuses_a_file_whose_sha256_does_not_match_the_manifest(export: Path) -> None:
    tamper(export, layout.CLAIMS, lambda b: b.replace(b"Fridays", b"Mondays"),
           fix_manifest=False)
    manifest = (export / layout.MANIFEST).read_text().splitlines()
    line = next(i for i, text in enumerate(manifest, 1) if '"claims.jsonl"' in text)
    before = _counts()

    with pytest.raises(CommandError, match=rf"manifest.json line {line}: the sha256 of "
                                           r"claims.jsonl does not match"):
        import_(export, "--fleet", "fleet-copy")

    assert _counts() == before


@pytest.mark.django_db
def test_it_refuses_a_promoted_claim_in_a_merge_without_as_proposals(
    export: Path, fleet_b: Fleet
) -> None:
    before = _counts()

    with pytest.raises(CommandError, match=r"claims.jsonl line 2: cc-02 is promoted: a merge "
                                           "into an existing fleet never keeps"):
        import_(export, "--into", "fleet-b")

    assert _counts() == before


@pytest.mark.django_db
def test_it_answers_json_when_refusing_for_scripts(export: Path) -> None:
    tamper(export, layout.CLAIMS, _line(2, lambda r: {**r, "type": "rumour"}))
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("import_fleet", str(export), "--fleet", "x", "--json", stdout=out)
    answer = json.loads(out.getvalue())
    assert answer == {"ok": False, "file": "claims.jsonl", "line": 2,
                      "reason": answer["reason"]}
    assert answer["reason"].startswith("type must be one of")


def _tar(*members: tuple[str, bytes, bytes]) -> bytes:
    """A tar of (name, type, data) members; type tarfile.REGTYPE or SYMTYPE."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.size = kind, len(data) if kind == tarfile.REGTYPE else 0
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
            tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return out.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "kind"), [("../manifest.json", tarfile.REGTYPE),
                                            ("manifest.json", tarfile.SYMTYPE),
                                            ("notes.txt", tarfile.REGTYPE)])
def test_it_refuses_a_tar_member_an_export_does_not_hold(
    export: Path, tmp_path: Path, name: str, kind: bytes
) -> None:
    members = [(p.name, tarfile.REGTYPE, p.read_bytes()) for p in sorted(export.iterdir())
               if p.name != "manifest.json"]
    archive = tmp_path / "hostile.tar"
    archive.write_bytes(_tar(*members, (name, kind, b"{}")))
    before = _counts()

    with pytest.raises(CommandError, match="not a file an export holds"):
        import_(archive, "--fleet", "fleet-copy")

    assert _counts() == before
    assert not (tmp_path / "manifest.json").exists()
