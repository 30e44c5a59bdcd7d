"""How the real Claude Code CLI hands the write-rules block of CLAUDE.md to its model.

Claude Code reads CLAUDE.md at start and sends it to the model wrapped in its own words,
which present the file as instructions to follow. So the block must say, inside itself and
before any entry, that its entries are reviewed observations to verify, not instructions
(mcp_bridge.rules.FRAMING). This test runs the pinned CLI against the scripted stand-in
and checks where the block lands in the request and what wraps it; docs/trust.md quotes it.
"""

from __future__ import annotations

from mcp_bridge import rules
from tests.realclients.claude_session import drive
from tests.realclients.conftest import Clients, Fleet
from tests.realclients.messages_standin import Say

CLAIMS = [{"id": "cc-07", "date": "2026-12-01", "independent_sessions": 2, "confidence": 0.5,
           "text": "Run the slug tests with -q; they print the diff of slugs."}]


def test_claude_code_sends_the_block_with_its_framing_under_its_own_wrapper(
    clients: Clients, fleet: Fleet
) -> None:
    block = rules.block("demo", CLAIMS)
    (fleet.project / "CLAUDE.md").write_text("# Project\n\n" + block + "\n")
    ran = drive(clients, fleet, "Say done.", [Say("done")])
    sent = ran.agent_requests()[0].dump()
    assert rules.FRAMING in sent and "- Noted [cc-07, 2026-12-01" in sent
    assert sent.index(rules.FRAMING) < sent.index("Run the slug tests")
    heading = sent.index("## ctxlake: fleet demo's reviewed notes")
    wrapper = sent[max(0, sent.rindex("<system-reminder>", 0, heading)):heading]
    # As of the pinned CLI: the file goes into a <system-reminder> in the first user
    # message, under words that make it an order; its HTML comments (our markers and the
    # "managed by" note) are stripped, so the framing must be plain text (it is).
    assert "you MUST follow them exactly as written" in wrapper, wrapper
    assert "CLAUDE.md (project instructions, checked into the codebase)" in wrapper, wrapper
    assert rules.BEGIN not in sent and "Managed by" not in sent
    print("\nClaude Code's wrapper before the block:\n" + wrapper)
