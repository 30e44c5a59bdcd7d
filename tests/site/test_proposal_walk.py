"""The walk of one proposal, from its spool line to the render: each rule is asked once.

fleet.lineage (which cited sessions are verified, how many independent) costs queries; a
proposal used to enter it twice on its way through the drain.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from claims.models import Claim
from ctxlake_site import workers
from fleet import lineage
from fleet.models import Fleet
from mcp_bridge.contract.spool import Spool

LINEAGE = Path(lineage.__file__).resolve()


@contextmanager
def entries_into(module_file: Path) -> Iterator[Counter[str]]:
    """Count calls into `module_file` from outside it (by function), on this thread."""
    entered: Counter[str] = Counter()
    target = str(module_file)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_filename != target:
            return
        caller = frame.f_back
        if caller is None or caller.f_code.co_filename != target:
            entered[frame.f_code.co_name] += 1

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield entered
    finally:
        sys.setprofile(previous)


def test_one_proposal_enters_lineage_once_from_spool_to_render(
    fleet_a: Fleet, spool_for: Callable[..., Spool]
) -> None:
    spool_for("fleet-a", "ada", session="s-1").append(
        "claim.proposed",
        {"claim": "the build needs node 20", "type": "fact", "subject": "build",
         "evidence": [{"session_id": "s-1", "message_id": "m1"}]},
    )
    with entries_into(LINEAGE) as entered:
        workers.drain_spool()
        workers.render_fleet(fleet_a)
    claim = Claim.objects.get()
    assert claim.independent_sessions == 1  # the one verified session, counted
    assert sum(entered.values()) == 1, dict(entered)
