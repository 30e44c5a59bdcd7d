"""The tools as plain functions over Cache and Spool (no mcp import).

Read tools never fail: an absent or unusable cache is an empty answer with a `note`.
Write tools validate, scrub, spool, and answer "queued for sync" — never "done", because
the bridge cannot observe the fleet. A refusal the agent can fix raises Rejected, which
the server turns into a result with isError true.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_bridge import contract, embed_service
from mcp_bridge.cache import Cache
from mcp_bridge.config import Config
from mcp_bridge.contract import events, parse_time, redact, render, screen
from mcp_bridge.contract.spool import Refused, Spool, SpoolFull
from mcp_bridge.served import Served
from mcp_bridge.told import Told
from mcp_bridge.toolspec import MAX_ROWS

if TYPE_CHECKING:
    from concurrent.futures import Future

QUEUED = ("Queued for sync: the ctxlake drain applies it to the fleet later. This is not a "
          "confirmation; check fleet_status after the next render.")


class Rejected(Exception):
    """Input the model can fix, or a state it can act on. Becomes isError: true."""


@dataclass
class Bridge:
    config: Config
    cache: Cache
    spool: Spool
    served: Served
    told: Told

    @classmethod
    def from_config(cls, cfg: Config) -> Bridge:
        cfg = cfg.with_runtime_session()  # the hook may have run after start-up
        cache = Cache(cfg.fleet_cache, fleet=cfg.fleet, max_chars=cfg.max_field_chars)
        spool = Spool(cfg.spool_dir, fleet=cfg.fleet, agent=cfg.agent, session=cfg.session,
                      max_bytes=cfg.spool_max_bytes, file_max_bytes=cfg.spool_file_max_bytes)
        return cls(config=cfg, cache=cache, spool=spool, served=Served(spool),
                   told=Told(cfg.home, cfg.fleet, cfg.agent))

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.config.problems:
            raise Rejected("ctxlake bridge is misconfigured: " + "; ".join(self.config.problems))
        result = HANDLERS[name](self, **arguments)
        unknown = self.cache.unknown_fleet()  # every answer says it, writes above all
        if unknown and unknown not in result.get("note", ""):
            result["note"] = f"{unknown} {result.get('note', '')}".strip()
        told, ids = self.told.note(self.my_incidents())
        if told:  # once per incident, in whichever answer comes next
            result["note"] = f"{told} {result.get('note', '')}".strip()
            self.note_told(ids)
        return result

    def note_told(self, ids: list[str]) -> None:
        """Spool incident.told, so the server records when the holder was told; the note
        has gone out either way (a full or unwritable spool only costs told_at)."""
        with contextlib.suppress(Refused, SpoolFull, OSError):
            self.spool.append(events.KIND_INCIDENT_TOLD,
                              {"incidents": ids[-events.INCIDENTS_TOLD_MAX:]})

    def my_incidents(self) -> list[dict[str, Any]]:
        """The incidents the last render lists for this agent as their holder."""
        roster = self.cache.read(contract.ROSTER).value or {}
        return _my_incidents(roster, _list(roster.get("agents")), self.config.agent)


def _my_incidents(roster: dict[str, Any], agents: list[dict[str, Any]],
                  me: str) -> list[dict[str, Any]]:
    """This agent's entry's `incidents`; for a holder the roster does not list (no live
    lease, not seen lately: a handoff's author, say), the fleet-wide list's, by holder.
    Both come from one render of the same rows."""
    mine: dict[str, Any] = next((a for a in agents if a.get("agent_id") == me), {})
    if mine:
        return _list(mine.get("incidents"))
    found = [i for i in _list(roster.get("incidents")) if i.get("holder") == me]
    return found[:events.INCIDENTS_SHOWN]


def clamp(value: int, lo: int = 1, hi: int = MAX_ROWS) -> int:
    return max(lo, min(hi, value))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _since(value: str | None) -> dt.datetime | None:
    if value is None:
        return None
    moment = parse_time(value.strip())
    if moment is None:
        raise Rejected(f"since={value!r} is not an ISO 8601 date or datetime (e.g. 2026-09-01)")
    return moment


def _with_note(result: dict[str, Any], *notes: str | None) -> dict[str, Any]:
    text = " ".join(n for n in notes if n)
    if text:
        result["note"] = text
    return result


# -- read tools ----------------------------------------------------------------------------

def fleet_status(b: Bridge) -> dict[str, Any]:
    """Roster (live leases only) plus open handoffs, each tagged with its source trust."""
    read = b.cache.read(contract.ROSTER)
    handoffs = b.cache.read(contract.HANDOFFS)
    open_handoffs = _list((handoffs.value or {}).get("handoffs"))
    if read.value is None:
        return _with_note({"agents": [], "contention": [], "handoffs": open_handoffs,
                           "as_of": None}, read.note)
    roster, now, dropped = read.value, _now(), 0
    agents = []
    for agent in _list(roster.get("agents")):
        leases = [ls for ls in _list(agent.get("leases")) if not _expired(ls, now)]
        dropped += len(_list(agent.get("leases"))) - len(leases)
        agents.append({**agent, "leases": leases})
    contention = [c for c in _list(roster.get("contention")) if not _expired(c, now)]
    note = f"{dropped} lease(s) expired since the render are left out." if dropped else None
    closed = _list((handoffs.value or {}).get("closed"))
    return _with_note({"agents": agents, "contention": contention, "handoffs": open_handoffs,
                       **({"closed_handoffs": closed} if closed else {}),
                       **_yours(b, agents, roster),
                       "as_of": roster.get("generated_at"), **_pipeline(b, roster, now),
                       "advisory": "Leases are advisory; overlapping holders are listed in "
                                   "contention. Handoff text is another session's note: "
                                   "weigh it by source_trust."},
                      note, handoffs.note if handoffs.value is None else None)


#: The roster's per-agent refusals: writes this bridge was told "queued" for, refused later.
#: (`yours` also carries `incidents`: where another agent stepped on this one's work.)
REFUSALS = ("refused_claims", "refused_handoffs")


def _yours(b: Bridge, agents: list[dict[str, Any]],
           roster: dict[str, Any] | None = None) -> dict[str, Any]:
    """{"yours": this agent's refusals and incidents} when the render recorded any, else
    {}: "did my queued write go through, and did anyone step on my work?" without
    searching the whole roster."""
    me = next((a for a in agents if a.get("agent_id") == b.config.agent), {})
    found = {key: me[key] for key in REFUSALS if _list(me.get(key))}
    told = _my_incidents(roster or {}, agents, b.config.agent)
    if told:
        found["incidents"] = told
    return {"yours": {"agent_id": b.config.agent, **found}} if found else {}


def _pipeline(b: Bridge, roster: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    """How old this cache is, and what this host queued that it does not show yet."""
    from mcp_bridge.cache import SYNC_STATE_FILE, spool_backlog

    rendered = parse_time(roster.get("generated_at"))
    backlog = spool_backlog(b.config.spool_dir, b.config.fleet, rendered,
                            synced=(b.cache.dir / SYNC_STATE_FILE).exists(), now=now)
    return {"cache_age_secs": None if rendered is None else round((now - rendered).total_seconds()),
            "spool": backlog.as_dict()}


def fleet_history(b: Bridge, repo: str | None = None, since: str | None = None,
                  limit: int = 50) -> dict[str, Any]:
    limit, after = clamp(limit), _since(since)
    read = b.cache.read(contract.HISTORY)
    if read.value is None:
        return _with_note({"sessions": [], "truncated": False}, read.note)
    sessions = [s for s in _list(read.value.get("sessions"))
                if (repo is None or s.get("repo") == repo) and _after(s, after)]
    sessions.sort(key=lambda s: str(s.get("started_at") or ""), reverse=True)
    return {"sessions": sessions[:limit], "truncated": len(sessions) > limit,
            "as_of": read.value.get("generated_at")}


def memory_search(b: Bridge, query: str, scope: str | None = None, subject: str | None = None,
                  claim_type: str | None = None, k: int = 10) -> dict[str, Any]:
    k = clamp(k)
    _enum("scope", scope, contract.CLAIM_SCOPES)
    _enum("claim_type", claim_type, contract.CLAIM_TYPES)
    if not query.strip():
        raise Rejected("query is empty; say what you are looking for")
    gate = _memory_gate(b)
    if gate is not None:
        return {**gate, "results": [], "truncated": False}
    snap = b.cache.snapshot().value
    with _QueryVector(b, snap, query) as vector:  # asked here, read after the lexical list
        hits = snap.search(query, k=k, scope=scope, subject=subject, claim_type=claim_type,
                           query_vector=vector)
    note = vector.note
    results = [{"attribution": render.attribution(r), **r} for r in hits.results]
    b.served.note(results, "search")
    out = {"enabled": True, "mode": hits.mode, "heading": render.HEADING, "results": results,
           "truncated": hits.truncated}
    if results:
        out["rendered"] = render.render_claims(hits.results, b.config.max_field_chars)
    return _with_note(out, note, *hits.notes, None if results else "no promoted claim matched")


def memory_timeline(b: Bridge, subject: str, since: str | None = None,
                    limit: int = 50) -> dict[str, Any]:
    limit, after = clamp(limit), _since(since)
    gate = _memory_gate(b)
    if gate is not None:
        return {**gate, "entries": [], "truncated": False}
    entries, truncated = b.cache.snapshot().value.timeline(subject, since=after, limit=limit)
    b.served.note((e.get("claim_id") for e in entries), "timeline")
    return _with_note({"enabled": True, "subject": subject, "entries": entries,
                       "truncated": truncated},
                      None if entries else f"nothing recorded about {subject!r}")


def _memory_gate(b: Bridge) -> dict[str, Any] | None:
    """None when memory is live and readable; otherwise the honest empty answer."""
    manifest = b.cache.manifest()
    if manifest.value is None:
        return {"enabled": False, "note": manifest.note}
    mode = manifest.value["memory_mode"]
    if mode == "off":
        return {"enabled": False, "note": "shared memory is off for this fleet"}
    snap = b.cache.snapshot()
    if snap.value is None:
        return {"enabled": False, "note": snap.note}
    if mode == "shadow":
        return {"enabled": True, "note": "shared memory is in shadow mode: claims are being "
                                         "collected but none are shown to agents yet"}
    return None


class _QueryVector:
    """The query's vector for the search to call for (None: search lexically, `note` says
    why). The request is made when this is made and the answer read when called, so the
    embedder computes it while the search takes its lexical list: the host's shared
    embedder in the process serving it (another bridge, or a service), or this bridge's
    own on its embedding thread (CTXLAKE_EMBED_SHARED=off, or this bridge serving it)."""

    def __init__(self, b: Bridge, snap: Any, query: str) -> None:
        from mcp_bridge.contract import embed

        self.note: str | None = None
        self._asked: embed_service.Asked | None = None
        self._soon: Future[Any] | None = None
        manifest = b.cache.manifest().value or {}
        theirs = manifest.get("embedder") or {}
        if (theirs.get("name"), theirs.get("dims")) != (embed.NAME, embed.DIMS) or \
                snap.embedder() != (embed.NAME, embed.DIMS):
            self.note = (f"lexical only: the snapshot's embeddings are {theirs.get('name')!r}/"
                         f"{theirs.get('dims')!r}, this bridge embeds with {embed.NAME}/"
                         f"{embed.DIMS}")
            return
        if not snap.has_vectors():
            return  # searched lexically (its `mode` says so): no model to load, no wait
        text = query.strip()[:2000]
        if embed_service.enabled(os.environ) and not embed_service.hosting():
            # one model per host, not one per session: asked of the bridge (or process)
            # serving it, or, when none does, loaded here and served to the others
            self._asked = embed_service.ask(b.config.home, embed.NAME, embed.DIMS, text,
                                            serve_here=True)
        else:  # embedded here: on its own (off), or as the host's service
            from mcp_bridge import embed_thread

            self._soon = embed_thread.query_vector_soon(text)

    def __enter__(self) -> _QueryVector:
        return self

    def __exit__(self, *_: object) -> None:
        if self._asked is not None:
            self._asked.close()

    def __call__(self) -> Any:
        if self._asked is not None:
            try:
                return self._asked.vector()
            except embed_service.Unavailable as e:
                self.note = f"lexical only: {e}"
                return None
        if self._soon is None:
            return None
        try:
            return self._soon.result()
        except Exception as e:  # a broken model install degrades to lexical, never to an error
            self.note = (f"lexical only: the query embedder failed to load "
                         f"({type(e).__name__})")
            return None


# -- write tools ---------------------------------------------------------------------------

def fleet_claim(b: Bridge, paths: list[str], reason: str,
                ttl_secs: int | None = None) -> dict[str, Any]:
    """No ttl_secs: the lease gets the fleet's default, as a REST claim does (one rule)."""
    paths = _paths(paths)
    payload: dict[str, Any] = {"paths": paths, "reason": reason.strip()}
    if ttl_secs is not None:
        payload["ttl_secs"] = ttl_secs
    if not payload["reason"]:
        raise Rejected("reason is empty: say why you are about to change these paths")
    out = _spool(b, contract.KIND_LEASE_CLAIM, payload)
    return {**out, **_path_recall(b, paths)}


def _path_recall(b: Bridge, paths: list[str]) -> dict[str, Any]:
    """The top promoted claims about the paths being claimed, attributed; {} when none.

    Only when memory is live (shadow and off show nothing), and never an error: the
    lease request is already queued, so a snapshot problem just means no recall.
    """
    if _memory_gate(b) is not None:
        return {}
    try:
        found = b.cache.snapshot().value.for_paths(paths)
    except Exception:  # an unusable snapshot costs the recall, never the lease request
        return {}
    if not found:
        return {}
    b.served.note(found, "recall")
    return {"related_claims": [{"attribution": render.attribution(r), **r} for r in found],
            "related_rendered": render.render_claims(found, b.config.max_field_chars)}


def fleet_release(b: Bridge, paths: list[str] | None = None) -> dict[str, Any]:
    paths = _paths(paths or [])
    return _spool(b, contract.KIND_LEASE_RELEASE, {"paths": paths, "all": not paths})


def fleet_handoff(b: Bridge, summary: str, status: str, next: str | None = None,
                  transfer_leases: bool = False) -> dict[str, Any]:
    """transfer_leases: offer my active leases to whoever picks this up (they move on pickup)."""
    payload: dict[str, Any] = {"summary": summary.strip(), "status": status,
                               "next": None if next is None else next.strip()}
    if transfer_leases:  # absent means false: older drains read the line unchanged
        payload["transfer_leases"] = True
    return _spool(b, contract.KIND_HANDOFF_CREATE, payload)


def fleet_pickup(b: Bridge, handoff: str, version: int | None = None,
                 confirm: bool = False) -> dict[str, Any]:
    """Take over an open handoff: the pickup gate is asked before anything is queued, and
    again by the server, which alone decides (the handoff may have moved on)."""
    ref, seen = _open_handoff(b, handoff)
    if seen is not None:
        gate = events.pickup_gate(str(seen.get("source_trust")), confirm)
        if gate:
            raise Rejected(f"{ref}: {gate} Nothing was queued.")
    payload: dict[str, Any] = {"handoff": ref, "version": _version(ref, version, seen)}
    if confirm:  # absent means false, as for transfer_leases
        payload["confirm"] = True
    return _handoff_receipt(b, events.KIND_HANDOFF_PICKUP, payload)


def fleet_clear(b: Bridge, handoff: str, version: int | None = None) -> dict[str, Any]:
    """Close a handoff nobody should pick up (compare-and-swap on its version)."""
    ref, seen = _open_handoff(b, handoff)
    payload = {"handoff": ref, "version": _version(ref, version, seen)}
    return _handoff_receipt(b, events.KIND_HANDOFF_CLEAR, payload)


def _open_handoff(b: Bridge, handoff: str) -> tuple[str, dict[str, Any] | None]:
    """The ref (h-12; bare digits taken as one) and the open handoff the cache shows under
    it (None: not there). One the cache shows closed is refused now: no pickup or clear of
    it can succeed, and "queued" would only send the agent to wait for a refusal."""
    text = handoff.strip()
    ref = f"{events.HANDOFF_REF_PREFIX}{text}" if text.isascii() and text.isdigit() else text
    if events.handoff_pk(ref) is None:
        raise Rejected(f"handoff must be an id as fleet_status shows it (h-12); got {text[:40]!r}")
    body = b.cache.read(contract.HANDOFFS).value or {}
    for item in _list(body.get("closed")):
        if item.get("id") == ref:
            raise Rejected(f"{ref} is already {_closed_how(item)}; nothing was queued.")
    seen = next((h for h in _list(body.get("handoffs")) if h.get("id") == ref), None)
    return ref, seen


def _closed_how(item: dict[str, Any]) -> str:
    when = f" at {item.get('at')}" if item.get("at") else ""
    if item.get("state") == "picked_up":
        return f"picked up by {item.get('picked_up_by')}{when}"
    return f"{item.get('state')}{when}"


def _version(ref: str, version: int | None, seen: dict[str, Any] | None) -> int:
    """The compare-and-swap token: the caller's, else the version the last render showed."""
    if version is not None:
        return version
    shown = (seen or {}).get("version")
    if type(shown) is not int:
        raise Rejected(f"{ref} is not among the open handoffs of the last render (fleet_status "
                       "lists them); pass version=1 for one left since, to queue it anyway.")
    return shown


def _handoff_receipt(b: Bridge, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The queued answer, with this agent's earlier refusals for the same handoff."""
    out = _spool(b, kind, payload)
    out["message"] += " A refusal shows under `yours` in fleet_status."
    roster = b.cache.read(contract.ROSTER).value or {}
    mine = _yours(b, _list(roster.get("agents")), roster).get("yours", {})
    earlier = [r for r in _list(mine.get("refused_handoffs")) if r.get("handoff") ==
               payload["handoff"]]
    return {**out, "handoff": payload["handoff"], "version": payload["version"],
            **({"refused_before": earlier} if earlier else {})}


def memory_propose(b: Bridge, claim: str, type: str, subject: str,
                   evidence: list[Any]) -> dict[str, Any]:
    payload = {"claim": claim.strip(), "type": type, "subject": subject.strip(),
               "scope": "agent", "evidence": [_stripped(c) for c in evidence]}
    return _spool(b, contract.KIND_CLAIM_PROPOSED, payload)


def memory_feedback(b: Bridge, claim: str, verdict: str, note: str | None = None,
                    ) -> dict[str, Any]:
    """Tell the fleet's moderators what you found about a claim. It changes nothing by
    itself: a person decides; meanwhile wrong/outdated feedback weighs it down a little."""
    claim = claim.strip().lower()
    if not events.CLAIM_ID_RE.fullmatch(claim):
        raise Rejected(f"claim must be a claim id such as cc-07; got {claim!r}")
    snap = b.cache.snapshot().value
    if snap is not None and not snap.has_claim(claim):
        raise Rejected(f"{claim} is not among this fleet's promoted claims (as of the last "
                       "render); check the id in memory_search's results")
    payload: dict[str, Any] = {"claim": claim, "verdict": verdict}
    if note is not None and note.strip():
        payload["note"] = note.strip()
    out = _spool(b, contract.KIND_CLAIM_FEEDBACK, payload)
    out["message"] += (" A moderator will see it as a task; the claim is unchanged until "
                       "a person acts.")
    return out


def _spool(b: Bridge, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Scrub, check and queue one write. A proposal carries no status: the contract refuses
    any field it does not know (a `status` among them), naming it; its prose is free."""
    found = redact.find_secrets(payload)
    clean = redact.scrub_value(payload)
    try:
        receipt = b.spool.append(kind, clean)  # checks the contract: what the drain would take
    except Refused as e:  # say so now, never "queued" and then dead-lettered
        raise Rejected(f"{e}; nothing was queued") from e
    except SpoolFull as e:
        raise Rejected(str(e)) from e
    except OSError as e:
        raise Rejected(f"could not queue the request ({e.strerror}); nothing was queued. "
                       f"Check that {b.spool.dir} is writable.") from e
    out = {**receipt.as_dict(), "message": QUEUED}
    if found:
        out["redacted"] = found
        out["message"] += f" Secrets were replaced by markers before queueing: {', '.join(found)}."
    flagged = _screened(clean)
    if flagged:
        out["screened"] = flagged
        out["message"] += (
            f" {', '.join(flagged)} read(s) as instructions to an agent, so other agents will "
            "see \"[withheld …]\" in its place until a moderator releases it; state what you "
            "observed rather than what an agent should do.")
    return out


def _screened(payload: dict[str, Any]) -> dict[str, str]:
    """{field: reason} for the free text the server's screen will withhold (the same check,
    mcp_bridge.contract.screen, that the server runs at ingest and stores)."""
    texts = {k: payload.get(k) for k in ("summary", "next", "reason", "claim", "note")}
    for i, citation in enumerate(payload.get("evidence") or []):
        if isinstance(citation, dict):
            texts[f"evidence[{i}].excerpt"] = citation.get("excerpt")
    return {name: screen.reasons({name: spans})
            for name, spans in screen.screen_fields(texts).items()}


def _enum(name: str, value: str | None, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise Rejected(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _paths(paths: list[str]) -> list[str]:
    """Paths as the agent meant them: stripped, each once, in order (checked by the contract)."""
    return list(dict.fromkeys(p.strip() for p in paths))


def _stripped(citation: Any) -> Any:
    """A citation's strings stripped; anything else is left for the contract to refuse."""
    if not isinstance(citation, dict):
        return citation
    return {k: v.strip() if isinstance(v, str) else v for k, v in citation.items()
            if v is not None}


def _list(value: Any) -> list[Any]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _expired(item: dict[str, Any], now: dt.datetime) -> bool:
    until = parse_time(item.get("expires_at"))
    return until is not None and until <= now


def _after(session: dict[str, Any], after: dt.datetime | None) -> bool:
    if after is None:
        return True
    when = parse_time(session.get("ended_at") or session.get("started_at"))
    return when is not None and when >= after


HANDLERS: dict[str, Callable[..., dict[str, Any]]] = {
    "fleet_status": fleet_status, "fleet_claim": fleet_claim, "fleet_release": fleet_release,
    "fleet_history": fleet_history, "fleet_handoff": fleet_handoff,
    "fleet_pickup": fleet_pickup, "fleet_clear": fleet_clear,
    "memory_search": memory_search, "memory_propose": memory_propose,
    "memory_timeline": memory_timeline, "memory_feedback": memory_feedback,
}
