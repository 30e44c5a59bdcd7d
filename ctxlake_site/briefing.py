"""The SessionStart briefing: what a new session in a fleet should know, in few tokens.

Built from the same pieces the bridge serves — the rendered roster, handoffs and history,
and promoted claims in their attribution form — and cleaned by the bridge's own sanitiser,
since every string in it was written by some agent. Capped so it never crowds a context
window: sections are added in priority order until the token estimate would pass the cap.
"""

from __future__ import annotations

from typing import Any

from mcp_bridge.contract import events, render, sanitize

DEFAULT_MAX_TOKENS = 1500
CHARS_PER_TOKEN = 4  # a deliberately pessimistic estimate for English and code
LIST_ROWS = 8
LEASES_SHOWN = 5  # per agent line
CHANGED_PATHS_SHOWN = 5  # per session line


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _clean(value: Any, limit: int = 300) -> Any:
    return sanitize.clean_value(value, max_chars=limit)


def _shown(roster: dict[str, Any], handoffs: dict[str, Any], history: dict[str, Any],
           ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The rendered files cut to the rows the sections list (LIST_ROWS of each, LEASES_SHOWN
    per agent), before anything is cleaned; the sections list all they are given.

    The sanitiser's cost is per string, and a fleet's roster and history hold hundreds of
    agents, leases and sessions where the briefing names eight of each: they were cleaned
    whole, in every render. Rows left out of the cut are neither cleaned nor shown. Older
    rosters have no `incidents`: none listed.
    """
    incidents = roster.get("incidents")
    return (
        {
            "agents": [{**agent, "leases": agent["leases"][:LEASES_SHOWN]}
                       for agent in roster["agents"][:LIST_ROWS]],
            "contention": roster["contention"][:LIST_ROWS],
            **({"incidents": incidents[:LIST_ROWS]} if isinstance(incidents, list) else {}),
        },
        {"handoffs": handoffs["handoffs"][:LIST_ROWS]},
        {"sessions": history["sessions"][:LIST_ROWS]},
    )


def _agents(roster: dict[str, Any]) -> list[str]:
    lines = []
    for agent in roster["agents"]:
        held = ", ".join(f"`{lease['path']}`" for lease in agent["leases"]) or "no leases"
        lines.append(f"- **{agent['agent_id']}** ({agent['runtime'] or 'unknown runtime'}): {held}")
    for c in roster["contention"]:
        lines.append(
            f"- overlap: {c['agents'][0]} `{c['paths'][0]}` ↔ "
            f"{c['agents'][1]} `{c['paths'][1]}` until {c['expires_at']}"
        )
    return lines


def _incidents(roster: dict[str, Any]) -> list[str]:
    """The fleet's incidents of the last day, one line each, the holder named (this file
    is read by every agent of the fleet)."""
    return [
        "- " + events.incident_line(str(i.get("kind")), str(i.get("by")),
                                    [str(p) for p in i.get("paths") or []], str(i.get("at")),
                                    holder=i.get("holder"), detail=str(i.get("detail") or ""))
        for i in roster.get("incidents", []) if isinstance(i, dict)
    ]


def _handoffs(handoffs: dict[str, Any]) -> list[str]:
    """Each open handoff as its author's words (or the withheld marker the render put in)."""
    return [
        f"- {h['id']} from {h['from_agent']} [{h['status']}, source trust {h['source_trust']}]"
        f", {h['from_agent']} wrote: “{h['summary']}”"
        + (f" Next: “{h['next']}”" if h["next"] else "")
        for h in handoffs["handoffs"]
    ]


def _history(history: dict[str, Any]) -> list[str]:
    """A session by its facts (outcome, repo, branch, changed paths); its agent's summary
    only when the instruction screen passed it, and then as that agent's words."""
    return [_session_line(s) for s in history["sessions"]]


def _session_line(s: dict[str, Any]) -> str:
    where = s.get("repo") or "unknown repo"
    if s.get("branch"):
        where += f" ({s['branch']})"
    line = f"- {str(s.get('started_at') or '')[:10]} {s['agent_id']} in {where}: " + (
        s.get("outcome") or "no outcome yet")
    paths = [str(p) for p in s.get("changed_paths") or []]
    if paths:
        shown = ", ".join(f"`{p}`" for p in paths[:CHANGED_PATHS_SHOWN])
        more = len(paths) - CHANGED_PATHS_SHOWN
        line += f"; changed {shown}" + (f" and {more} more" if more > 0 else "")
    if "summary" in (s.get("withheld") or []):
        return line + "; its summary is withheld until a moderator releases it"
    if s.get("summary"):
        line += f". {s['agent_id']} wrote: “{s['summary']}”"
    return line


def compose(
    fleet: str,
    *,
    roster: dict[str, Any],
    handoffs: dict[str, Any],
    history: dict[str, Any],
    claims: list[dict[str, Any]],
    generated_at: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    path_claims: list[dict[str, Any]] | None = None,
) -> str:
    roster, handoffs, history = (_clean(cut) for cut in _shown(roster, handoffs, history))
    claims, about_leases = _clean(claims, 600), _clean(path_claims or [], 600)
    sections = [
        ("Active agents and their leases (advisory)", _agents(roster)),
        ("Incidents (last 24 h)", _incidents(roster)),
        ("Open handoffs (written by agents unless the trust says operator)", _handoffs(handoffs)),
        (
            "Shared memory about the paths leased now",
            render.render_claims(about_leases).splitlines() if about_leases else [],
        ),
        ("Shared memory", render.render_claims(claims).splitlines() if claims else []),
        ("Recent sessions", _history(history)),
    ]
    out = [f"# ctxlake briefing for fleet {fleet}", f"_As of {generated_at}._", ""]
    omitted = []
    for title, lines in sections:
        if not lines:
            continue
        block = [f"## {title}", *lines, ""]
        if estimate_tokens("\n".join(out + block)) > max_tokens - 20:
            omitted.append(title.split(" (")[0].lower())
            continue
        out += block
    if omitted:
        out.append(
            f"_Left out to stay under {max_tokens} tokens: {', '.join(omitted)}. "
            "Ask the ctxlake tools (fleet_status, fleet_history, memory_search)._"
        )
    return "\n".join(out).rstrip() + "\n"
