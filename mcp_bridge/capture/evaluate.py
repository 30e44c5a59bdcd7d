"""`python -m mcp_bridge capture-eval DIR --labels FILE`: how good is capture, measured.

Runs the deterministic extractors over every transcript in DIR (Claude Code project JSONL
or Codex rollouts, `<scenario>.jsonl`) and judges the proposals against a labels file in
the shape of formation-dev's `labels.json`: per scenario the lessons a moderator wants
(`required`, counted in recall; `optional`, acceptable), and what must never be proposed
(`must_not`). Prints, per set and per extractor: precision (proposals that state a wanted
lesson / proposals), recall of required lessons, and every must-not hit; `--json` for a
script. Reads DIR at run time: a set is never copied into the project.

The judging is mechanical, so it is printed beside every proposal for a person to check.
A proposal states a lesson when it shares at least MATCH_SHARE of the lesson's salient
words (words of 4+ letters, numbers, identifiers, paths: not stop words) and no fewer than
MATCH_MIN of them; of several, the best. A must-not entry is hit by a proposal that
matches it better than any wanted lesson, and "any claim at all" by every proposal.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mcp_bridge.capture import extract, record, transcript

MATCH_SHARE = 0.3
MATCH_MIN = 2
_STOP = frozenset((
    "a", "an", "the", "and", "or", "not", "but", "with", "from", "into", "onto", "that",
    "this", "these", "those", "there", "their", "then", "than", "when", "what", "which",
    "while", "where", "whose", "been", "being", "have", "has", "had", "does", "done", "for",
    "are", "was", "were", "will", "would", "should", "could", "can", "cannot", "must", "need",
    "needs", "any", "all", "each", "every", "some", "one", "two", "its", "it's", "it", "is",
    "to", "of", "in", "on", "at", "by", "as", "be", "no", "yes", "via", "per", "also", "only",
    "just", "about", "after", "before", "over", "under", "more", "most", "less", "least",
    "very", "much", "many", "such", "same", "other", "another", "claim", "claims", "test",
    "tests",
))


@dataclass
class Judged:
    scenario: str
    extractor: str
    claim: str
    verdict: str  # "wanted" (states a required/optional lesson), "noise", "must_not"
    label: str = ""  # the lesson id or must-not text it was judged against
    share: float = 0.0


@dataclass
class Report:
    name: str
    scenarios: int = 0
    proposals: list[Judged] = field(default_factory=list)
    required: int = 0
    recalled: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return (sum(j.verdict == "wanted" for j in self.proposals) / len(self.proposals)
                if self.proposals else None)

    @property
    def recall(self) -> float | None:
        return len(self.recalled) / self.required if self.required else None

    @property
    def must_not_hits(self) -> list[Judged]:
        return [j for j in self.proposals if j.verdict == "must_not"]

    def by_extractor(self) -> dict[str, tuple[int, int]]:
        """extractor → (wanted, proposed)."""
        wanted, proposed = Counter[str](), Counter[str]()
        for j in self.proposals:
            proposed[j.extractor] += 1
            wanted[j.extractor] += j.verdict == "wanted"
        return {x: (wanted[x], proposed[x]) for x in sorted(proposed)}


def salient(text: str) -> set[str]:
    """The words that carry a sentence's meaning: 4+ letters, numbers, identifiers and
    paths (a path also by its parts: "README.md" is "readme" too)."""
    words = re.findall(r"[A-Za-z_][\w./-]*[\w]|\d+(?:\.\d+)?", text.lower())
    words += [part for w in words for part in re.split(r"[./]", w) if part]
    return {w for w in words if (len(w) >= 4 or any(c.isdigit() for c in w) or "_" in w
                                 or "." in w) and w not in _STOP}


def share(claim: str, label: str) -> float:
    wanted = salient(label)
    common = salient(claim) & wanted
    return len(common) / len(wanted) if wanted and len(common) >= MATCH_MIN else 0.0


def judge(name: str, claim: str, extractor: str, labels: dict[str, Any]) -> Judged:
    lessons = [(x["id"], x["lesson"]) for key in ("required", "optional")
               for x in labels.get(key, [])]
    best = max(((share(claim, text), lid) for lid, text in lessons), default=(0.0, ""))
    for forbidden in labels.get("must_not", []):
        if forbidden.strip().lower() == "any claim at all":
            return Judged(name, extractor, claim, "must_not", forbidden, 1.0)
        hit = share(claim, forbidden)
        if hit >= MATCH_SHARE and hit > best[0]:
            return Judged(name, extractor, claim, "must_not", forbidden, round(hit, 2))
    if best[0] >= MATCH_SHARE:
        return Judged(name, extractor, claim, "wanted", best[1], round(best[0], 2))
    return Judged(name, extractor, claim, "noise", best[1], round(best[0], 2))


def evaluate(directory: Path, labels: dict[str, Any], *, name: str = "") -> Report:
    report = Report(name or directory.name)
    for path in sorted(directory.glob("*.jsonl")):
        scenario = labels.get(path.stem)
        if not isinstance(scenario, dict):
            continue
        report.scenarios += 1
        t = transcript.read(str(path))
        rec = record.build(t, cwd="", start=None)
        found = extract.candidates(t.steps, relative=rec.relative)
        judged = [judge(path.stem, c.claim, c.extractor, scenario) for c in found]
        report.proposals += judged
        required = [x["id"] for x in scenario.get("required", [])]
        report.required += len(required)
        hit = {j.label for j in judged if j.verdict == "wanted"}
        report.recalled += [f"{path.stem}:{r}" for r in required if r in hit]
        report.missed += [f"{path.stem}:{r}" for r in required if r not in hit]
    return report


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f} %"


def render(report: Report) -> Iterable[str]:
    wanted = sum(j.verdict == "wanted" for j in report.proposals)
    yield (f"{report.name}: {report.scenarios} transcripts, {len(report.proposals)} proposals; "
           f"precision {_pct(report.precision)} ({wanted}/{len(report.proposals)}), recall "
           f"{_pct(report.recall)} ({len(report.recalled)}/{report.required}), must-not hits "
           f"{len(report.must_not_hits)}")
    for extractor, (good, made) in report.by_extractor().items():
        yield f"  {extractor:10} {good}/{made} worth promoting"
    for j in report.proposals:
        yield f"  [{j.verdict:8} {j.label or '-'} {j.share:.2f}] {j.scenario} {j.extractor}: " \
              f"{j.claim[:160]}"
    for missed in report.missed:
        yield f"  missed required lesson {missed}"


def main(argv: list[str], *, command: str = "capture-eval") -> int:
    p = argparse.ArgumentParser(prog=f"python -m mcp_bridge {command}",
                                description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("directory", type=Path, help="a directory of <scenario>.jsonl transcripts")
    p.add_argument("--labels", type=Path, required=True, help="labels.json for that directory")
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    a = p.parse_args(argv)
    try:
        labels = json.loads(a.labels.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        p.error(f"cannot read the labels file {a.labels}: {e}")
    if not isinstance(labels, dict):
        p.error(f"{a.labels}: labels must be a JSON object of scenarios")
    if not a.directory.is_dir():
        p.error(f"{a.directory} is not a directory")
    report = evaluate(a.directory, labels)
    if a.json:
        body = {**asdict(report), "precision": report.precision, "recall": report.recall,
                "must_not_hits": len(report.must_not_hits),
                "by_extractor": report.by_extractor()}
        sys.stdout.write(json.dumps(body, indent=1) + "\n")
    else:
        sys.stdout.write("\n".join(render(report)) + "\n")
    return 0
