"""The rules block's way back: a person's edit inside it becomes a proposal, not a loss.

`write-rules` owns the managed block, so it rewrites whatever is inside. A person who
corrects a note there meant something; before the block is rewritten, the edit goes to
the fleet's moderators as a claim proposal (the ordinary `claim.proposed` spool event, so
the bridge's redactor and the screen's message run on it here, and the server's redactor
and instruction screen at ingest, as for any proposal), with the diff as its evidence. It
is never a promotion: a moderator reads it like any other proposal.

To tell a person's edit from our own text the bridge keeps, per file, the block it last
wrote (`$CTXLAKE_HOME/rules/<fleet>/<hash of the file's path>.json`); the bridge never asks
the server. A block that differs from that copy was edited; one with no copy yet (the first
`--enable`, or files written before this existed) is taken as ours. After the proposal is
queued the copy is updated to the edited block, then to the block written, so a second run
proposes nothing again.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_bridge.contract import atomic, events

STATE_SUBDIR = "rules"  # under $CTXLAKE_HOME
SUBJECT = "rules block"  # when the edit is not inside one claim's note
#: The claim an entry of the block renders: "- Noted [cc-01, …" (rules.claim_lines).
_ENTRY = re.compile(r"^- Noted \[([^,\]\s]+)")
_MARKER = re.compile(r"^<!--.*-->$")


@dataclass(frozen=True)
class Edit:
    path: Path
    written: str  # the block as write-rules last wrote it
    found: str  # the block as it is on disk now

    def diff(self, repo: Path) -> str:
        name = _relative(self.path, repo)
        return "".join(difflib.unified_diff(
            _lines(self.written), _lines(self.found), fromfile=f"a/{name} (as written)",
            tofile=f"b/{name} (as edited)"))


def _lines(block: str) -> list[str]:
    return block.replace("\r\n", "\n").splitlines(keepends=True)


def _relative(path: Path, repo: Path) -> str:
    try:
        return path.relative_to(repo).as_posix()
    except ValueError:
        return path.name


def state_file(home: Path, fleet: str, path: Path) -> Path:
    digest = hashlib.sha256(str(path.resolve()).encode("utf-8", "surrogatepass")).hexdigest()
    return home / STATE_SUBDIR / fleet / f"{digest[:32]}.json"


def written(home: Path, fleet: str, path: Path) -> str | None:
    """The block write-rules last wrote into `path`, or None (never, or unreadable)."""
    try:
        data = json.loads(state_file(home, fleet, path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    block = data.get("block") if isinstance(data, dict) else None
    return block if isinstance(block, str) else None


def remember(home: Path, fleet: str, path: Path, block: str | None) -> None:
    """Keep `block` as what is in `path` by our hand (None: the file holds no block now)."""
    target = state_file(home, fleet, path)
    if block is None:
        target.unlink(missing_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"path": str(path), "block": block}, ensure_ascii=True)
    atomic.write_atomic(target, body.encode("ascii"), mode=0o600)


def find_edits(home: Path, fleet: str, blocks: dict[Path, str | None]) -> list[Edit]:
    """Each file whose block on disk (`blocks`: path → block, None when it has none) is
    not the one write-rules last wrote there."""
    out = []
    for path, found in blocks.items():
        before = written(home, fleet, path)
        if before is not None and found is not None and found != before:
            out.append(Edit(path, before, found))
    return out


def proposal(edit: Edit, repo: Path, *, session: str,
             claims: list[dict[str, Any]]) -> dict[str, Any] | None:
    """memory_propose's arguments for one edit: the person's text as the claim, the diff
    (in as many citations as it takes, within the contract's limits) as the evidence.
    None when the edit changed no text (blank lines, spacing, lines moved): nothing to say."""
    diff = edit.diff(repo).replace("\x00", "")  # Postgres stores no NUL; nothing else lost
    added, removed = _changed(diff)
    if sorted(added) == sorted(removed):
        return None
    if added:
        text = "\n".join(added)
    else:
        text = "A person removed this from the rules block: " + " ".join(removed)
    digest = hashlib.sha256(diff.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    name = _relative(edit.path, repo)
    chunk = events.EXCERPT_MAX_CHARS
    pieces = [diff[i:i + chunk] for i in range(0, len(diff), chunk)][:events.CITATIONS_MAX]
    evidence = [{"session_id": session, "message_id": f"write-rules:{name}:{digest}:{n}",
                 "repo": repo.name, "path": name, "excerpt": piece}
                for n, piece in enumerate(pieces, 1)]
    return {"claim": _bounded(text, events.CLAIM_MAX_CHARS), "type": "fact",
            "subject": _subject(edit, claims), "evidence": evidence}


def _changed(diff: str) -> tuple[list[str], list[str]]:
    """The text lines a person added and removed, without our markers or attribution."""
    added: list[str] = []
    removed: list[str] = []
    for line in diff.splitlines():
        if line.startswith(("+++", "---")) or line[:1] not in "+-" or _ENTRY.match(line[1:]):
            continue  # a file header, context, or our own attribution line
        text = line[1:].strip()
        if text and not _MARKER.match(text):
            (added if line[0] == "+" else removed).append(text)
    return added, removed


def _subject(edit: Edit, claims: list[dict[str, Any]]) -> str:
    """The subject of the one claim whose note the edit changed, else SUBJECT."""
    subjects = {str(c.get("id")): str(c.get("subject") or "") for c in claims}
    touched: set[str | None] = set()
    current: str | None = None
    matcher = difflib.SequenceMatcher(a=_lines(edit.written), b=_lines(edit.found),
                                      autojunk=False)
    owners: list[str | None] = []
    for line in _lines(edit.written):
        found = _ENTRY.match(line)
        current = found.group(1) if found else current
        owners.append(current)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        # An insertion belongs to the entry of the line before it; a change to its lines'.
        touched.update(owners[max(i1 - 1, 0):i1] if i1 == i2 else owners[i1:i2])
    touched.discard(None)
    only = touched.pop() if len(touched) == 1 else None
    return _bounded(subjects.get(str(only)) or SUBJECT, events.SUBJECT_MAX_CHARS)


def _bounded(text: str, limit: int) -> str:
    text = text.replace("\x00", "")
    return text if len(text) <= limit else text[:limit - 1] + "…"
