"""Fixtures for driving real MCP clients against the real bridge.

- `clients`: the pinned npm install (see npm_clients.py); the tests skip, visibly, only when
  the npm registry cannot be reached; their versions are printed at the end of the run.
- `fleet`: a throwaway HOME, CTXLAKE_HOME and project, with a fleet cache written by
  mcp_bridge.testing (a promoted claim, a briefing, another agent's live lease), and
  `fleet.install(runtime)` running the real `python -m mcp_bridge install` into them.
- `server_world`: the same world with an empty cache, which the real server in the test
  process drains and renders into (one machine running both); `moderator`: the person who
  promotes.

Nothing here is stubbed but the model behind Claude Code (messages_standin.py) and Codex
(responses_standin.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from mcp_bridge import testing
from mcp_bridge.contract import spool
from tests.realclients import npm_clients
from tests.realclients.matrix import CLIENTS, VERSIONS

if TYPE_CHECKING:
    from django.contrib.auth.models import User

ROOT = Path(__file__).resolve().parents[2]
FLEET, AGENT, HOLDER = "fleet-rc", "ada", "bo"
CLAIM_ID = "cc-rc-1"
CLAIM_TEXT = "Stripe webhooks are retried for three days, so handlers must be idempotent."
#: A string only the SessionStart hook can have put into what Claude Code sends.
BRIEFING_MARK = "briefing-mark-4c1e: deploy freeze until Friday"
LEASED_GLOB, LEASE_REASON = "src/payments/**", "rewriting webhook retries"
#: Inherited variables that would point a client elsewhere than this test's stand-ins, and
#: pytest's own (PYTEST_XDIST_WORKER would tell a scenario's project pytest it is a worker).
FOREIGN_ENV = ("CTXLAKE_", "ANTHROPIC_", "CLAUDE", "OPENAI_", "CODEX_", "MCP_", "HERMES_",
               "PYTEST_")



@dataclass(frozen=True)
class Clients:
    """Where the pinned clients are, and a clean environment to run them in."""

    bin_dir: Path
    #: client → why its binary does not run on this machine (absent when it runs)
    cannot_run: dict[str, str] = field(default_factory=dict)

    def path(self, name: str) -> str:
        return str(self.bin_dir / name)

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(FOREIGN_ENV) or k == "CTXLAKE_EMBED_SHARED"}
        return npm_clients.run_env({**base, "HOME": str(home), **extra})


@pytest.fixture(scope="session")
def clients() -> Clients:
    status = npm_clients.ensure(lambda text: sys.stderr.write(f"ctxlake: {text}\n"))
    if not status.ready:
        if status.unreachable:
            pytest.skip(f"real clients not installed: {status.reason}")
        pytest.fail(f"real clients not installed: {status.reason}")
    found = Clients(npm_clients.bin_dir())
    for client, (binary, _package) in CLIENTS.items():
        try:
            done = subprocess.run([found.path(binary), "--version"], capture_output=True,
                                  text=True, timeout=60, env=found.env(Path.home()))
            said = (done.stdout or done.stderr).strip()
            if done.returncode != 0:
                found.cannot_run[client] = f"`{binary} --version` exited {done.returncode}: "
                found.cannot_run[client] += said[:300]
        except OSError as e:
            said, found.cannot_run[client] = "", f"`{binary}` does not start: {e}"
        VERSIONS[client] = found.cannot_run.get(client) or (said.splitlines() or ["?"])[0]
    return found


@dataclass
class Fleet:
    """One test's world: HOME, CTXLAKE_HOME, a project, and the fleet's cache."""

    root: Path
    home: Path = field(init=False)
    ctx_home: Path = field(init=False)
    project: Path = field(init=False)

    def __post_init__(self) -> None:
        self.home, self.ctx_home = self.root / "home", self.root / "ctxlake"
        self.project = self.root / "project"
        for path in (self.home, self.ctx_home, self.project):
            path.mkdir(parents=True)

    def env(self) -> dict[str, str]:
        """What `install` runs with: this HOME and CTXLAKE_HOME (passed through to entries)."""
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(FOREIGN_ENV) or k == "CTXLAKE_EMBED_SHARED"}
        return {**base, "HOME": str(self.home), "CTXLAKE_HOME": str(self.ctx_home)}

    def install(self, runtime: str, *options: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "mcp_bridge", "install", "--runtime", runtime,
             "--fleet", FLEET, "--agent", AGENT, "--project", str(self.project), *options],
            capture_output=True, text=True, env=self.env(), cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def events(self) -> list[dict[str, Any]]:
        """Every line the bridge and its hooks spooled for this fleet."""
        return spool.read_events(self.ctx_home / "spool", FLEET)

    def what_happened(self, done: subprocess.CompletedProcess[str] | None = None) -> str:
        """For a failure message: every spooled line (kind, agent, session, payload head),
        the capture log's tail and, given the client's run, its output's tails."""
        lines = [f"{e['kind']} agent={e.get('agent')} session={e.get('session')} "
                 f"{json.dumps(e.get('payload'))[:300]}" for e in self.events()]
        log = self.ctx_home / "logs" / "capture.log"
        return ("spooled:\n  " + ("\n  ".join(lines) or "(nothing)") + "\ncapture.log:\n"
                + (log.read_text(errors="replace")[-3000:] if log.exists() else "(none)")
                + (f"\nclient stdout tail:\n{done.stdout[-2000:]}\nclient stderr tail:\n"
                   f"{done.stderr[-3000:]}" if done else ""))


@pytest.fixture
def server_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any) -> Fleet:
    """One machine running both: the server (drain, render) reads and writes this world's
    CTXLAKE_HOME spool and cache; its cache starts empty."""
    world = Fleet(tmp_path)
    spool_dir, cache_dir = world.ctx_home / "spool", world.ctx_home / "cache"
    monkeypatch.setenv("CTXLAKE_SPOOL_DIR", str(spool_dir))  # ctxlake_site.paths reads these
    monkeypatch.setenv("CTXLAKE_CACHE_DIR", str(cache_dir))
    settings.CTXLAKE_SPOOL_DIR, settings.CTXLAKE_CACHE_DIR = spool_dir, cache_dir
    return world


@pytest.fixture
def moderator(db: None) -> User:
    """A person: staff, holding the moderation permission, granted fleets one by one."""
    # imported here: bench/capture_set.py imports this module without setting Django up
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("rita", password="rita-pass-1234", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    return user


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    world = Fleet(tmp_path)
    testing.build_cache(
        world.ctx_home / "cache", FLEET, vectors=None,
        claims=[testing.claim(CLAIM_ID, CLAIM_TEXT, type="gotcha", subject="payments")],
        agents=[{"agent_id": HOLDER, "last_seen_at": testing.iso(testing.NOW),
                 "leases": [{"path": LEASED_GLOB, "reason": LEASE_REASON,
                             "expires_at": testing.iso(testing.NOW.replace(year=2099))}]}],
        briefing=f"# Fleet briefing\n{HOLDER} holds {LEASED_GLOB}\n{BRIEFING_MARK}\n")
    return world
