"""The rule that turns what sessions did with a claim into its confidence
(mcp_bridge/contract/usefulness.py): bounded, a new claim not punished, the reason readable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mcp_bridge.contract import usefulness as rule
from mcp_bridge.contract.usefulness import Record, base_rate, confidence, evidence, why


@pytest.mark.parametrize("sessions", [1, 2, 3, 6])
def test_it_does_not_punish_a_new_claim(sessions: int) -> None:
    """Nothing recorded yet, or only shown: confidence is the evidence alone (× 1)."""
    for r in (Record(evidence_sessions=sessions), Record(evidence_sessions=sessions, served=40)):
        assert rule.usefulness(r) == 1.0
        assert confidence(r) == round(evidence(sessions), 3)
    assert confidence(Record()) == rule.EVIDENCE_ONE_SESSION


def test_evidence_grows_towards_one_with_independent_sessions() -> None:
    values = [evidence(n) for n in range(1, 8)]
    assert values == sorted(values)
    assert values[0] == rule.EVIDENCE_ONE_SESSION
    assert values[-1] < 1.0


def test_failures_lower_it_and_successes_raise_it_a_little() -> None:
    new = confidence(Record())
    failing = [confidence(Record(used=n, failed=n)) for n in (1, 3, 10)]
    assert new > failing[0] > failing[1] > failing[2]
    assert confidence(Record(used=4, partial=4)) < new  # 2 of 4, nearer 0.375 than 0.75
    succeeding = Record(used=50, succeeded=50)
    assert new < confidence(succeeding) <= rule.EVIDENCE_ONE_SESSION * rule.USEFUL_CEILING
    assert rule.usefulness(succeeding) == pytest.approx(rule.USEFUL_CEILING)  # not 1 / 0.75


def test_it_is_judged_against_the_fleets_own_rate() -> None:
    """Half-successful is sound in a fleet where half the sessions succeed (it earns
    trust), and hurts in one where most succeed."""
    r = Record(used=10, succeeded=5, failed=5)
    assert rule.usefulness(r, 0.5) > 1.0
    assert rule.usefulness(r, 0.9) < 0.5


def test_a_few_unlucky_sessions_move_it_little_and_many_failures_all_the_way() -> None:
    """The evidence, not the point estimate, moves it: a sound claim (fleet rate 0.8) with
    6 of 10 sessions succeeding keeps nearly all of it, while 7 of 23 takes it to the floor
    (the previous rule, a ratio of rates, put them at 0.82 and 0.47)."""
    assert rule.usefulness(Record(used=10, succeeded=6, failed=4), 0.8) > 0.9
    assert rule.usefulness(Record(used=23, succeeded=7, failed=16), 0.8) == rule.USEFUL_FLOOR
    one_failure = rule.usefulness(Record(used=1, failed=1), 0.8)
    assert 0.7 < one_failure < 1.0


def test_only_used_sessions_count_not_shown_ones() -> None:
    assert confidence(Record(served=100, used=2, failed=2)) == confidence(
        Record(served=2, used=2, failed=2))


def test_the_floors_hold() -> None:
    assert rule.usefulness(Record(used=10_000, failed=10_000)) == rule.USEFUL_FLOOR
    worst = Record(used=10_000, failed=10_000, flags=20, contested=True)
    expected = rule.EVIDENCE_ONE_SESSION * rule.USEFUL_FLOOR * rule.CONTESTED_FACTOR
    assert confidence(worst) == round(expected, 3) > 0


def test_flags_push_a_claim_down_but_never_out() -> None:
    """An agent's flag weighs as FLAG_AS_FAILED failed sessions: a new claim loses about
    half, two agents take it to the floor, never below."""
    one, many = confidence(Record(flags=1)), confidence(Record(flags=9))
    assert one == confidence(Record(used=2, failed=2))
    assert 0.3 < one < 0.5 * rule.EVIDENCE_ONE_SESSION + 0.01
    assert many == round(rule.EVIDENCE_ONE_SESSION * rule.USEFUL_FLOOR, 3)
    assert confidence(Record(contested=True)) == round(
        rule.EVIDENCE_ONE_SESSION * rule.CONTESTED_FACTOR, 3)


def test_one_stray_flag_barely_moves_a_claim_that_sessions_used_with_success() -> None:
    used = Record(used=30, succeeded=25, failed=5)
    assert rule.usefulness(replace(used, flags=1)) > 0.95 * rule.usefulness(used)


def test_confidence_stays_in_zero_to_one_and_is_rounded() -> None:
    best = confidence(Record(evidence_sessions=9, used=500, succeeded=500), 0.2)
    assert best == 1.0
    odd = confidence(Record(used=3, succeeded=1, partial=1, failed=1), 0.7)
    assert odd == round(odd, 3)


def test_base_rate_is_the_default_until_enough_sessions_have_ended() -> None:
    few = rule.BASE_RATE_MIN_SESSIONS - 1
    assert base_rate({}) == rule.BASE_RATE_DEFAULT
    assert base_rate({"failed": few}) == rule.BASE_RATE_DEFAULT
    assert base_rate({"abandoned": 500, "success": few}) == rule.BASE_RATE_DEFAULT
    assert base_rate({"success": 10, "failed": 10}) == 0.5
    assert base_rate({"partial": 20}) == 0.5


def test_base_rate_is_bounded() -> None:
    lo, hi = rule.BASE_RATE_BOUNDS
    assert base_rate({"failed": 100}) == lo
    assert base_rate({"success": 100}) == hi
    assert base_rate({"success": 80, "failed": 20}) == pytest.approx(0.8)


@pytest.mark.parametrize(("record", "said"), [
    (Record(used=3, succeeded=3), "used in 3 sessions, all succeeded"),
    (Record(used=1, succeeded=1), "used in 1 session, which succeeded"),
    (Record(used=2, failed=2), "used in 2 sessions, all failed"),
    (Record(used=4, succeeded=2, partial=1, failed=1),
     "used in 4 sessions: 2 succeeded, 1 partly, 1 failed"),
    (Record(used=2), "used in 2 sessions"),
    (Record(served=2), "shown in 2 sessions, not used yet"),
    (Record(), "no use recorded yet"),
    (Record(used=1, failed=1, flags=2, contested=True),
     "used in 1 session, which failed; flagged wrong or outdated by 2 agents; "
     "contested by a moderator"),
])
def test_why_says_what_sessions_did_with_it(record: Record, said: str) -> None:
    assert why(record) == said


def test_why_for_agents_is_brief_and_empty_until_something_is_recorded() -> None:
    assert why(Record(), brief=True) == ""
    assert why(Record(served=5), brief=True) == ""
    assert why(Record(contested=True), stale="bo changed src/x.py", brief=True) == ""
    assert why(Record(used=3, succeeded=3, flags=1), stale="bo changed src/x.py",
               brief=True) == "used in 3 sessions, all succeeded; flagged wrong or outdated " \
                              "by 1 agent"
    assert why(Record(used=3, succeeded=3), stale="bo changed src/x.py") == (
        "used in 3 sessions, all succeeded; possibly stale since bo changed src/x.py")
