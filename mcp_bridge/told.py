"""Which incidents this agent's bridges have already told it about, so each is told once.

The render lists a holder's recent incidents in its roster entry (roster.json
`agents[].incidents`) for a day; the bridge adds a one-line note about the ones it has not
shown yet to the next tool answer of any tool, then records their ids here, under
$CTXLAKE_HOME/told/ (one small JSON file per fleet and agent, written atomically). Local
by design: the bridge never writes to the server except through the spool, and telling
an agent twice after a lost file is harmless. The bridge also spools `incident.told` with
the ids, so the server can show when each holder was told (Incident.told_at).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from mcp_bridge.contract import atomic

SUBDIR = "told"
KEEP = 500  # ids remembered; far more than a day of incidents for one agent
SHOWN_IN_NOTE = 3


class Told:
    def __init__(self, home: Path, fleet: str, agent: str) -> None:
        digest = hashlib.sha256(f"{fleet}\0{agent}".encode()).hexdigest()[:24]
        self.path = Path(home) / SUBDIR / f"{digest}.json"
        self._ids: list[str] | None = None

    def ids(self) -> list[str]:
        if self._ids is None:
            try:
                raw = json.loads(self.path.read_bytes()[:1 << 20])
            except (OSError, ValueError):
                raw = {}
            found = raw.get("ids") if isinstance(raw, dict) else None
            self._ids = [i for i in found if isinstance(i, str)] if isinstance(found, list) \
                else []
        return self._ids

    def note(self, incidents: list[dict[str, Any]]) -> tuple[str | None, list[str]]:
        """One line about the incidents not told yet (newest first) and their ids, recorded
        as told; (None, []) when there is nothing new. A failure to record costs a repeat,
        never the answer."""
        seen = set(self.ids())
        new = [i for i in incidents if isinstance(i.get("id"), str) and i["id"] not in seen
               and isinstance(i.get("text"), str)]
        if not new:
            return None, []
        self._ids = ([*self.ids(), *(i["id"] for i in new)])[-KEEP:]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            atomic.write_atomic(self.path, json.dumps({"ids": self._ids}).encode(), mode=0o600)
        except OSError:
            pass
        shown = "; ".join(f"{i['text']} ({i['id']})" for i in new[:SHOWN_IN_NOTE])
        more = f"; +{len(new) - SHOWN_IN_NOTE} more" if len(new) > SHOWN_IN_NOTE else ""
        line = f"ctxlake incident: {shown}{more}. See fleet_status `yours.incidents`."
        return line, [i["id"] for i in new]
