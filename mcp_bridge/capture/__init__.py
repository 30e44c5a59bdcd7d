"""Sessions teach the fleet: a session's record and candidate claims from its transcript.

Stdlib plus mcp_bridge.contract only (no Django, no network). `transcript` reads Claude
Code and Codex JSONL into neutral steps, `record` derives the session.end fields,
`extract` proposes candidate claims, `run` is the detached `capture-session` process the
SessionEnd hook starts. docs/capture.md says how each field and candidate is decided.
"""
