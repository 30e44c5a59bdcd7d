"""Seed write_cpu_ab's fleet in one side's database, with that side's own code.

    cd SIDE_ROOT && CTXLAKE_DB_NAME=… python /path/to/bench/ab_seed.py SLUG AGENTS CLAIMS

Run with the working directory at the checkout whose code should do the writing (this one,
or the baseline's worktree): its migrations, models and token rules apply, so each side
starts from a database its own code made. Creates the fleet, AGENTS agents with one agent
token each and CLAIMS promoted claims (live_server.make_claims: the seeding every HTTP
bench uses), then VACUUM (ANALYZE) the database. Prints {agent_id: secret} as JSON.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(Path.cwd()), str(BENCH)]  # the side's code first, then the bench helpers
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from live_server import make_claims, vocabulary  # noqa: E402

from fleet import tokens  # noqa: E402
from fleet.models import Agent, Fleet  # noqa: E402


def seed(slug: str, agents: int, claims: int) -> dict[str, str]:
    call_command("migrate", verbosity=0)
    call_command("createcachetable", verbosity=0)
    fleet = Fleet.objects.create(slug=slug, name="write_cpu_ab (throwaway)", memory_mode="live")
    secrets = {}
    for n in range(agents):
        agent = Agent.objects.create(fleet=fleet, agent_id=f"a{n:04d}")
        secrets[agent.agent_id] = tokens.issue_token(
            fleet, role="agent", name=agent.agent_id, agent=agent).secret
    make_claims(fleet, 0, claims, vocabulary(), random.Random(25))
    with connection.cursor() as cur:
        cur.execute("VACUUM (ANALYZE)")
    return secrets


if __name__ == "__main__":
    slug, agents, claims = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(seed(slug, agents, claims)))
