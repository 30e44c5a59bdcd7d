"""What a promoted claim has earned: the one definition of its confidence and of the
short reason agents are given for it.

Stdlib only and pure. The server computes it when a session's outcome, a use or a
feedback lands (claims.usefulness) and stores it in Claim.confidence, which both search
paths multiply into the score (mcp_bridge.contract.ranking.score); the bench that
simulates a fleet (bench/usefulness_sim.py) calls the very same function.

    confidence = evidence(independent sessions) × usefulness × flags × contested

- evidence: 0.8 for one session's word, towards 1.0 as independent sessions corroborate.
- usefulness: how the sessions that *used* the claim (cited it, or acted on it) ended,
  against how the fleet's sessions end in general. A Beta posterior with PRIOR_SESSIONS
  pseudo-sessions at the fleet's own success rate: a new claim scores exactly 1 (no
  punishment for being new), a claim used in sessions that fail more often than the
  fleet's do sinks, one used in sessions that succeed rises a little (at most
  USEFUL_CEILING). Sessions that were only *shown* a claim say nothing about it.
- flags: each agent with an open "wrong" or "outdated" feedback halves it, to at most
  FLAG_FLOOR: an agent can push a claim down, never out, and a moderator who dismisses
  the feedback restores it.
- contested: halved while a person has it contested.

A moderator may set a claim's confidence outright (claims.usefulness.set_confidence,
audited); that value then stands until a moderator clears it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

EVIDENCE_ONE_SESSION: Final = 0.8
PRIOR_SESSIONS: Final = 4.0
#: The fleet success rate assumed until it has this many ended sessions with an outcome.
BASE_RATE_DEFAULT: Final = 0.75
BASE_RATE_MIN_SESSIONS: Final = 20
BASE_RATE_BOUNDS: Final = (0.2, 0.95)
USEFUL_FLOOR: Final = 0.2
USEFUL_CEILING: Final = 1.25
FLAG_FACTOR: Final = 0.5
FLAG_FLOOR: Final = 0.25
CONTESTED_FACTOR: Final = 0.5
#: What each outcome says about the claims the session used (abandoned says nothing).
OUTCOME_CREDIT: Final = {"success": 1.0, "partial": 0.5, "failed": 0.0}


@dataclass(frozen=True)
class Record:
    """What the server knows about one claim's life with the fleet."""

    evidence_sessions: int = 1
    served: int = 0  # sessions shown the claim
    used: int = 0  # sessions that cited it or acted on it
    succeeded: int = 0  # of the used, by outcome
    partial: int = 0
    failed: int = 0
    flags: int = 0  # agents with an open wrong/outdated feedback
    contested: bool = False


def base_rate(outcomes: dict[str, int]) -> float:
    """The fleet's success rate (credit per ended session with an outcome), bounded; the
    default until enough sessions have ended."""
    n = sum(outcomes.get(o, 0) for o in OUTCOME_CREDIT)
    if n < BASE_RATE_MIN_SESSIONS:
        return BASE_RATE_DEFAULT
    rate = sum(OUTCOME_CREDIT[o] * outcomes.get(o, 0) for o in OUTCOME_CREDIT) / n
    lo, hi = BASE_RATE_BOUNDS
    return min(hi, max(lo, rate))


def evidence(sessions: int) -> float:
    return 1.0 - (1.0 - EVIDENCE_ONE_SESSION) * 0.5 ** max(0, sessions - 1)


def usefulness(r: Record, rate: float = BASE_RATE_DEFAULT) -> float:
    """Posterior success of the sessions that used the claim, over the fleet's rate."""
    n = r.succeeded + r.partial + r.failed
    credit = r.succeeded + 0.5 * r.partial
    posterior = (credit + PRIOR_SESSIONS * rate) / (n + PRIOR_SESSIONS)
    return min(USEFUL_CEILING, max(USEFUL_FLOOR, posterior / rate))


def flags(n: int) -> float:
    return max(FLAG_FLOOR, FLAG_FACTOR ** max(0, n))


def confidence(r: Record, rate: float = BASE_RATE_DEFAULT) -> float:
    """The claim's confidence in [0, 1] (rounded to 3 places, so re-deriving an unchanged
    record writes nothing)."""
    value = (evidence(r.evidence_sessions) * usefulness(r, rate) * flags(r.flags)
             * (CONTESTED_FACTOR if r.contested else 1.0))
    return round(min(1.0, max(0.0, value)), 3)


def why(r: Record, *, stale: str = "", brief: bool = False) -> str:
    """Why the claim ranks where it does, in a few words: "used in 3 sessions, all
    succeeded; possibly stale since bo changed src/x.py" for moderators. `brief` (what
    agents get, beside the CONTESTED and POSSIBLY STALE markers they already see) keeps
    only what sessions did with it, and is empty while nothing has been recorded."""
    parts = [_uses(r, brief=brief)]
    if r.flags:
        parts.append(f"flagged wrong or outdated by {r.flags} agent" + ("s" * (r.flags > 1)))
    if r.contested and not brief:
        parts.append("contested by a moderator")
    if stale and not brief:
        parts.append(f"possibly stale since {stale}")
    return "; ".join(p for p in parts if p)


def _uses(r: Record, *, brief: bool) -> str:
    if not r.used:
        if brief:
            return ""
        return f"shown in {_n(r.served)}, not used yet" if r.served else "no use recorded yet"
    ended = r.succeeded + r.partial + r.failed
    head = f"used in {_n(r.used)}"
    if not ended:
        return head
    if r.succeeded == ended:
        return head + (", which succeeded" if ended == 1 else ", all succeeded")
    if r.failed == ended:
        return head + (", which failed" if ended == 1 else ", all failed")
    tail = [f"{n} {word}" for n, word in ((r.succeeded, "succeeded"), (r.partial, "partly"),
                                          (r.failed, "failed")) if n]
    return f"{head}: {', '.join(tail)}"


def _n(sessions: int) -> str:
    return f"{sessions} session" + ("" if sessions == 1 else "s")
