"""Which capture a session end gets: the fleet's setting, narrowed by this host.

The fleet's operator chooses (`Fleet.capture_mode`, shown in the admin); the render
writes it into the cache manifest as `capture`, and this reads it there, so the hook
and the detached capture process never ask the server. The host can only narrow it:
`CTXLAKE_CAPTURE=off` turns capture off here whatever the fleet says, and the LLM step
also needs an API key in the host's environment (mcp_bridge.capture.llm).

Readings, in order: CTXLAKE_CAPTURE=off → off; no manifest yet, or a manifest without
the key (a server older than the setting) → candidates, the behaviour before the
setting existed; an unknown value → off (as an unknown memory_mode reads as off: the
safe reading of a setting this bridge does not understand is "do nothing").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from mcp_bridge import contract

ENV = "CTXLAKE_CAPTURE"
_OFF_WORDS = ("off", "0", "no", "false")


class Mode(NamedTuple):
    value: str  # one of contract.CAPTURE_MODES
    why: str  # where it came from, for the capture log

    @property
    def reads_transcript(self) -> bool:
        return self.value != contract.CAPTURE_OFF

    @property
    def wants_llm(self) -> bool:
        return self.value == contract.CAPTURE_LLM


def host_off(env: Mapping[str, str]) -> bool:
    return env.get(ENV, "on").strip().lower() in _OFF_WORDS


def resolve(cfg: Any, env: Mapping[str, str]) -> Mode:
    """The capture mode for `cfg.fleet` on this host (stdlib only: the hook calls it)."""
    if host_off(env):
        return Mode(contract.CAPTURE_OFF, f"{ENV}=off on this host")
    manifest = _manifest(cfg)
    if manifest is None:
        return Mode(contract.CAPTURE_CANDIDATES, "no cache manifest yet: the default")
    if "capture" not in manifest:
        return Mode(contract.CAPTURE_CANDIDATES, "the manifest predates the setting: the default")
    value = manifest["capture"]
    if value not in contract.CAPTURE_MODES:
        return Mode(contract.CAPTURE_OFF, f"unknown capture setting {str(value)[:40]!r}: off")
    return Mode(value, "the fleet's setting")


def max_candidates(cfg: Any) -> int:
    """The fleet's cap on a session's candidates (`capture_max` in the manifest), within
    0..CAPTURE_MAX_LIMIT; the default when there is no manifest, no key or a bad value."""
    value = (_manifest(cfg) or {}).get("capture_max")
    if type(value) is int and 0 <= value <= contract.CAPTURE_MAX_LIMIT:
        return value
    return contract.CAPTURE_MAX_DEFAULT


def _manifest(cfg: Any) -> dict[str, Any] | None:
    """The fleet's manifest if it is one this bridge reads, else None.

    Read directly (a few hundred bytes) rather than through mcp_bridge.cache, whose
    sanitising reader the hook's time budget does not need for one enumerated value.
    """
    try:
        with open(cfg.fleet_cache / contract.MANIFEST, "rb") as f:
            raw = json.loads(f.read(1 << 16))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(raw, dict) or raw.get("fleet") != cfg.fleet or \
            raw.get("format_version") != contract.FORMAT_VERSION:
        return None
    return raw
