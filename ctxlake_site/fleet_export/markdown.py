"""The copy for people: a fleet's promoted claims by subject, attributed, with evidence.

Built from the exported rows (not the database), so it says exactly what the JSONL says.
Every claim carries the attribution line agents see (mcp_bridge.contract.render), who
proposed and who promoted it, and its citations; nothing here is presented as bare fact.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from mcp_bridge.contract import render


def _who(actor: dict[str, Any]) -> str:
    return actor.get("user") or actor.get("token") or actor.get("agent") or "someone"


def _promotions(events: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each claim's latest `promoted` event."""
    return {e["claim"]: e for e in events if e["kind"] == "promoted"}


def _citation(e: dict[str, Any]) -> str:
    where = " ".join(p for p in (e["repo"], e["path"], e["commit"] and f"@ {e['commit']}") if p)
    line = f"  - session `{e['session_id']}`, message `{e['message_id']}`"
    line += f" ({where})" if where else ""
    if e["excerpt"]:
        line += "\n    > " + e["excerpt"].replace("\n", "\n    > ")
    return line


def _claim(c: dict[str, Any], cites: list[dict[str, Any]], promoted: dict[str, Any] | None,
           ) -> list[str]:
    head = render.attribution({**c, "date": (c["promoted_at"] or "")[:10],
                               "repos": [e["repo"] for e in cites]})
    by = f"proposed by {c['proposed_by'] or 'a person'}"
    if promoted is not None:
        by += f"; promoted by {_who(promoted['actor'])} on {promoted['at'][:10]}"
    return [f"- {head} ({c['type']})", "", "  " + c["text"].replace("\n", "\n  "), "",
            f"  _{by}_", "", *(_citation(e) for e in cites), ""]


def render_markdown(fleet: dict[str, Any], generated_at: str, claims: list[dict[str, Any]],
                    evidence: list[dict[str, Any]], events: list[dict[str, Any]]) -> str:
    cites: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in evidence:
        cites[e["claim"]].append(e)
    promotions = _promotions(events)
    by_subject: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in claims:
        if c["status"] == "promoted":
            by_subject[c["subject"]].append(c)
    lines = [f"# {fleet['name']} ({fleet['slug']}): what the fleet has learned", "",
             f"Exported {generated_at[:19].replace('T', ' ')} UTC. {render.HEADING}", ""]
    if not by_subject:
        lines += ["No promoted claims.", ""]
    for subject in sorted(by_subject, key=str.casefold):
        lines += [f"## {subject}", ""]
        for c in by_subject[subject]:
            lines += _claim(c, cites[c["id"]], promotions.get(c["id"]))
    return "\n".join(lines)
