"""Which promoted claims a session used: the ones it cited ("cc-07" in what the agent
wrote or ran) or acted on (a claim it was shown whose cited files it then changed, or
whose command it ran). session.end carries them as `used`; with the session's outcome
they are the usefulness loop's evidence (mcp_bridge.contract.usefulness).

Being shown a claim is not using it: a claim merely listed by memory_search and then
ignored says nothing about whether it helps, so it does not count here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mcp_bridge.capture.transcript import Step
from mcp_bridge.contract import events as ev
from mcp_bridge.contract.globs import covers

#: A command quoted in a claim's text: `make test-integration`, `NC_R1_MOCK=1 pytest`.
_QUOTED = re.compile(r"`([^`\n]{4,200})`")
_ID = re.compile(rf"\b{ev.CLAIM_ID_RE.pattern}\b", re.IGNORECASE)  # the contract's id


@dataclass(frozen=True)
class Known:
    """What the local snapshot says about one claim."""

    text: str
    paths: Sequence[str] = field(default_factory=tuple)


def ids_in(text: str) -> list[str]:
    return [m[0].lower() for m in _ID.finditer(text)]


def used_claims(steps: Sequence[Step], known: Mapping[str, Known], *,
                changed: Sequence[str], shown_at_start: Iterable[str] = ()) -> list[str]:
    """The known claims the session cited or acted on, in first-seen order (at most
    CLAIM_IDS_MAX)."""
    shown = dict.fromkeys(i for i in shown_at_start if i in known)
    cited: dict[str, None] = {}
    for s in steps:
        if s.kind in ("result", "user"):
            shown.update(dict.fromkeys(i for i in ids_in(s.text) if i in known))
        elif s.kind in ("assistant", "call"):
            cited.update(dict.fromkeys(i for i in ids_in(f"{s.text}\n{s.command}")
                                       if i in known))
    commands = [s.command for s in steps if s.kind == "call" and s.command]
    acted = [i for i in shown if i not in cited and _acted_on(known[i], changed, commands)]
    return [*cited, *acted][:ev.CLAIM_IDS_MAX]


def _acted_on(claim: Known, changed: Sequence[str], commands: Sequence[str]) -> bool:
    if any(p == c or covers(p, c) for p in claim.paths for c in changed):
        return True
    quoted = [q.strip() for q in _QUOTED.findall(claim.text)]
    return any(q in command for q in quoted if " " in q or "=" in q for command in commands)
