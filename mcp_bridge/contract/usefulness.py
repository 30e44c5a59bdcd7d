"""What a promoted claim has earned: the one definition of its confidence and of the
short reason agents are given for it.

Stdlib only and pure. The server computes it when a session's outcome, a use or a
feedback lands (claims.usefulness) and stores it in Claim.confidence, which both search
paths multiply into the score (mcp_bridge.contract.ranking.score); the bench that
simulates a fleet (bench/usefulness_sim.py) calls the very same function.

    confidence = evidence(independent sessions) × usefulness × contested

- evidence: 0.8 for one session's word, towards 1.0 as independent sessions corroborate.
- usefulness: how the sessions that *used* the claim (cited it, or acted on it) ended,
  weighed as evidence between two hypotheses: the claim is sound (its sessions succeed at
  the fleet's own rate) or it hurts (they succeed at only BAD_SHARE of that rate). Starting
  from PRIOR_BAD, each success or failure moves the probability that it hurts by its
  likelihood ratio; usefulness is the probability that it is sound over the prior's, so a
  new claim scores exactly 1 (no punishment for being new), one whose sessions end as the
  fleet's do rises to 1 / (1 − PRIOR_BAD) = USEFUL_CEILING, and one whose sessions fail
  far more often sinks towards USEFUL_FLOOR only as fast as the evidence for it grows: a
  few unlucky sessions of a sound claim move it little, twenty sessions that mostly failed
  move it all the way. Sessions that were only *shown* a claim say nothing about it.
  (The previous rule, the ratio of a Beta posterior to the fleet's rate, left claims whose
  sessions succeeded 35 % of the time against the fleet's 79 % at ~0.5 and in the top 5:
  bench/usefulness_sim.py measures both in one run, docs/benchmarks.md.)
  Flags weigh in the same scale: each agent with an open "wrong" or "outdated" feedback
  counts as FLAG_AS_FAILED failed sessions. A new claim one agent flags loses about half
  of it; a claim that dozens of sessions used with success barely moves for one stray
  flag (unattended spurious flags used to halve correct claims: the simulation's MRR fell
  8-14 % without a moderator dismissing them); an agent can push a claim down to
  USEFUL_FLOOR, never out, and a moderator who dismisses the feedback restores it.
- contested: halved while a person has it contested.

A moderator may set a claim's confidence outright (claims.usefulness.set_confidence,
audited); that value then stands until a moderator clears it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

EVIDENCE_ONE_SESSION: Final = 0.8
#: A claim that hurts: the sessions using it succeed at most this share of the fleet's rate.
BAD_SHARE: Final = 0.5
#: The probability that a claim hurts before any session used it (one in five).
PRIOR_BAD: Final = 0.2
#: The fleet success rate assumed until it has this many ended sessions with an outcome.
BASE_RATE_DEFAULT: Final = 0.75
BASE_RATE_MIN_SESSIONS: Final = 20
BASE_RATE_BOUNDS: Final = (0.2, 0.95)
USEFUL_FLOOR: Final = 0.2
USEFUL_CEILING: Final = 1.0 / (1.0 - PRIOR_BAD)  # sound beyond doubt: 1.25
#: Past this the likelihood ratio is certainty either way (and exp() stays finite).
MAX_LOG_EVIDENCE: Final = 50.0
#: An agent's open "wrong"/"outdated" feedback weighs as this many failed sessions.
FLAG_AS_FAILED: Final = 2
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
    """The probability that the claim is sound given how its sessions ended, over the
    prior's (see the module docstring); a partial session counts half each way, an
    agent's open flag as FLAG_AS_FAILED failures."""
    credit = r.succeeded + 0.5 * r.partial
    lost = r.failed + 0.5 * r.partial + FLAG_AS_FAILED * max(0, r.flags)
    bad = rate * BAD_SHARE
    log_lr = credit * math.log(bad / rate) + lost * math.log((1.0 - bad) / (1.0 - rate))
    odds = PRIOR_BAD / (1.0 - PRIOR_BAD) * math.exp(
        max(-MAX_LOG_EVIDENCE, min(MAX_LOG_EVIDENCE, log_lr)))
    p_bad = odds / (1.0 + odds)
    return min(USEFUL_CEILING, max(USEFUL_FLOOR, (1.0 - p_bad) / (1.0 - PRIOR_BAD)))


def confidence(r: Record, rate: float = BASE_RATE_DEFAULT) -> float:
    """The claim's confidence in [0, 1] (rounded to 3 places, so re-deriving an unchanged
    record writes nothing)."""
    value = (evidence(r.evidence_sessions) * usefulness(r, rate)
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
