"""Read and validate every line of an export before anything is written.

A line is refused, with its file and line number, when it is too long, not UTF-8, not
JSON (or nested too deep: the contract's parser), not an object with exactly the keys of
its file, or when a value breaks its field's rule (fields.SPECS). Every string is then
scrubbed of secrets with the redactor the drain uses (mcp_bridge.contract.redact) and the
scrubbed line is checked again. Then the file as a whole: the manifest's sha256 and count,
duplicate keys, references to rows the export does not hold, and the rules that tie
fields together (a promoted claim is fleet-scoped, has a promotion time and a recorded
promotion; a merge never carries a decided status unless it is told to propose).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ctxlake_site.fleet_export import layout
from ctxlake_site.fleet_export.fields import SPECS, WHOLE
from ctxlake_site.fleet_export.layout import Refused
from mcp_bridge.contract import events as ev
from mcp_bridge.contract import redact


@dataclass(frozen=True)
class Line:
    file: str
    number: int
    row: dict[str, Any]


@dataclass
class Checked:
    """A validated, scrubbed archive: its manifest and each data file's lines."""

    manifest: dict[str, Any]
    digest: str  # sha256 of manifest.json: what an import records, to know it again
    lines: dict[str, list[Line]] = field(default_factory=dict)
    scrubbed: int = 0  # lines whose text held a secret (now redacted)

    def rows(self, file: str) -> list[dict[str, Any]]:
        return [line.row for line in self.lines.get(file, [])]


def _row_problem(file: str, row: Any) -> str | None:
    if not isinstance(row, dict):
        return "must be a JSON object"
    spec = SPECS[file]
    missing, unknown = sorted(set(spec) - set(row)), sorted(set(row) - set(spec))
    if missing or unknown:
        return f"missing key(s) {missing}, unknown key(s) {unknown}"
    for name, check in spec.items():
        problem = check(row[name], name)
        if problem:
            return problem
    whole = WHOLE.get(file)
    return whole(row) if whole else None


def parse_line(file: str, number: int, raw: bytes) -> tuple[Line, bool]:
    """One line, checked and scrubbed; True when the scrub changed it."""
    if len(raw) > layout.MAX_LINE_BYTES:
        raise Refused(file, number, f"{len(raw)} bytes; a line may hold "
                                    f"{layout.MAX_LINE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Refused(file, number, f"not valid UTF-8 (byte {exc.start})") from None
    try:
        row = ev.loads(text)
    except ValueError as exc:
        raise Refused(file, number, f"not valid JSON: {exc}") from None
    problem = _row_problem(file, row)
    changed = False
    if problem is None:
        clean = redact.scrub_value(row)
        if clean != row:  # the drain's scrub, at ingest; the scrubbed line must hold too
            changed, row = True, clean
            problem = _row_problem(file, clean)
            problem = problem and f"after redacting a secret: {problem}"
    if problem:
        raise Refused(file, number, problem)
    return Line(file, number, row), changed


def split_lines(file: str, data: bytes) -> list[bytes]:
    """The file's lines; a last line without its newline means a truncated file."""
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] != b"":
        raise Refused(file, len(lines), "no newline at the end: the file is truncated")
    return lines[:-1]


def check_file(file: str, data: bytes, checked: Checked) -> None:
    lines = []
    for number, raw in enumerate(split_lines(file, data), start=1):
        if not raw.strip():
            raise Refused(file, number, "an empty line")
        line, scrubbed = parse_line(file, number, raw)
        checked.scrubbed += scrubbed
        lines.append(line)
    checked.lines[file] = lines


def unique(lines: Iterable[Line], key: Callable[[dict[str, Any]], Any], what: str) -> None:
    seen: dict[Any, int] = {}
    for line in lines:
        k = key(line.row)
        if k in seen:
            raise Refused(line.file, line.number,
                          f"duplicate {what} {k!r} (first on line {seen[k]})")
        seen[k] = line.number


def references(lines: Iterable[Line], fields: tuple[str, ...], known: set[Any],
               what: str) -> None:
    for line in lines:
        for name in fields:
            value = line.row[name]
            if value is not None and value not in known:
                raise Refused(line.file, line.number,
                              f"{name} names {what} {value!r}, which the export does not hold")


def _manifest_line(text: str, needle: str) -> int:
    """The manifest line where `needle` (a file's name) is written, for the refusal."""
    at = text.find(f'"{needle}"')
    return text.count("\n", 0, at) + 1 if at >= 0 else 0


def check_manifest(files: dict[str, bytes]) -> Checked:
    """The manifest's format and version, and every file's sha256 against it."""
    for name in layout.REQUIRED_FILES:
        if name not in files:
            raise Refused(name, 0, "missing from the export")
    raw = files[layout.MANIFEST]
    try:
        text = raw.decode("utf-8")
        manifest = ev.loads(text)
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise Refused(layout.MANIFEST, 0, f"not valid JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != layout.FORMAT:
        raise Refused(layout.MANIFEST, 0, f"not a {layout.FORMAT} manifest")
    if manifest.get("format_version") != layout.FORMAT_VERSION:
        raise Refused(layout.MANIFEST, _manifest_line(text, "format_version"),
                      f"format_version must be {layout.FORMAT_VERSION}")
    listed = manifest.get("files")
    if not isinstance(listed, dict) or not isinstance(manifest.get("counts"), dict):
        raise Refused(layout.MANIFEST, 0, "files and counts must be objects")
    for name, data in files.items():
        entry = listed.get(name) if name != layout.MANIFEST else {}
        if name != layout.MANIFEST and (
                not isinstance(entry, dict) or entry.get("sha256") != _sha256(data)):
            raise Refused(layout.MANIFEST, _manifest_line(text, name),
                          f"the sha256 of {name} does not match the file (changed, "
                          "truncated or not listed)")
    absent = sorted(set(listed) - set(files))
    if absent:
        raise Refused(absent[0], 0, "listed in manifest.json but missing from the export")
    return Checked(manifest=manifest, digest=_sha256(raw))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_archive(files: dict[str, bytes], *, merge: bool = False,
                  as_proposals: bool = False) -> Checked:
    """Every line of every file, then the rules across files; Refused on the first problem."""
    checked = check_manifest(files)
    for name in layout.DATA_FILES:
        if name in files:
            check_file(name, files[name], checked)
            count = checked.manifest["counts"].get(name.removesuffix(".jsonl"))
            if count != len(checked.lines[name]):
                raise Refused(name, 0, f"{len(checked.lines[name])} lines; the manifest "
                                       f"counts {count!r}")
    fleet = checked.lines[layout.FLEET]
    if len(fleet) != 1:
        raise Refused(layout.FLEET, len(fleet), "must hold exactly one line")
    _keys_and_references(checked)
    _claim_rules(checked)
    if merge:
        _merge_rules(checked, as_proposals=as_proposals)
    return checked


def _keys_and_references(c: Checked) -> None:
    L = c.lines
    unique(L[layout.AGENTS], lambda r: r["agent_id"], "agent_id")
    unique(L[layout.SESSIONS], lambda r: r["session_id"], "session_id")
    unique(L[layout.HANDOFFS], lambda r: r["ref"], "ref")
    unique(L[layout.CLAIMS], lambda r: r["id"], "claim id")
    unique(L[layout.EVIDENCE], lambda r: (r["claim"], r["session_id"], r["message_id"]),
           "citation")
    unique(L.get(layout.VECTORS, []), lambda r: r["claim"], "vector for")
    agents = {r["agent_id"] for r in c.rows(layout.AGENTS)}
    sessions = {r["session_id"] for r in c.rows(layout.SESSIONS)}
    claims = {r["id"] for r in c.rows(layout.CLAIMS)}
    references(L[layout.SESSIONS], ("agent",), agents, "agent")
    references(L[layout.HANDOFFS], ("from_agent", "picked_up_by"), agents, "agent")
    references(L[layout.HANDOFFS], ("from_session", "picked_up_session"), sessions, "session")
    references(L[layout.CLAIMS], ("proposed_by",), agents, "agent")
    references(L[layout.CLAIMS], ("superseded_by",), claims, "claim")
    references(L[layout.EVIDENCE], ("agent",), agents, "agent")
    for name in (layout.EVIDENCE, layout.EVENTS, layout.VECTORS):
        references(L.get(name, []), ("claim",), claims, "claim")
    for line in L[layout.EVENTS]:
        references([Line(line.file, line.number, line.row["actor"])], ("agent",), agents,
                   "agent")


def _ordering_problem(file: str, row: dict[str, Any]) -> str | None:
    """The database's rules that tie two fields of one row (fleet.models constraints)."""
    if file == layout.SESSIONS and row["ended_at"] and (
            ev.parse_instant(row["ended_at"]) < ev.parse_instant(row["started_at"])):
        return "ended_at is before started_at"
    if file == layout.HANDOFFS and row["state"] == "picked_up" and not row["picked_up_at"]:
        return "a picked-up handoff needs picked_up_at"
    if file == layout.CLAIMS and row["superseded_by"] == row["id"]:
        return "a claim cannot supersede itself"
    return None


def _claim_rules(c: Checked) -> None:
    promoted_events = {r["claim"] for r in c.rows(layout.EVENTS) if r["kind"] == "promoted"}
    for name in (layout.SESSIONS, layout.HANDOFFS, layout.CLAIMS):
        for line in c.lines[name]:
            problem = _ordering_problem(name, line.row)
            if problem:
                raise Refused(name, line.number, problem)
    for line in c.lines[layout.CLAIMS]:
        row = line.row
        if row["status"] != "promoted":
            continue
        if row["scope"] != "fleet" or not row["promoted_at"]:
            raise Refused(line.file, line.number,
                          "a promoted claim is fleet-scoped and has promoted_at")
        if row["id"] not in promoted_events:
            raise Refused(line.file, line.number, f"{row['id']} is promoted but "
                          f"{layout.EVENTS} records no promotion of it (who decided?)")


#: The statuses a merge files as proposals (rejected and retracted claims stay decided).
MERGED_STATUSES = ("proposed", "promoted")


def _merge_rules(c: Checked, *, as_proposals: bool) -> None:
    """A merge never carries a person's decision into another fleet: without
    --as-proposals a decided claim is refused; with it, each claim proposed needs the
    citations any proposal needs (the contract's rule)."""
    cites: dict[str, list[dict[str, Any]]] = {}
    for r in c.rows(layout.EVIDENCE):
        cites.setdefault(r["claim"], []).append({k: r[k] for k in ev.CITATION_LIMITS})
    for line in c.lines[layout.CLAIMS]:
        row = line.row
        if row["status"] != "proposed" and not as_proposals:
            raise Refused(line.file, line.number, (
                f"{row['id']} is {row['status']}: a merge into an existing fleet never "
                "keeps a decided status; pass --as-proposals to file claims as proposals "
                "for a person to decide"))
        if row["status"] in MERGED_STATUSES:
            problem = ev.citations_problem(cites.get(row["id"], []), f"{row['id']} evidence")
            if problem:
                raise Refused(line.file, line.number, problem)
