"""`manage.py issue_token --fleet F --role R --name N [--agent A] [--relay A …] [--json]`.

A host token (`--role host`) lists the agents of its host with `--relay`, once per agent;
the admin edits that list later, as agents join or leave the host.

Prints the secret once: only its hash is stored, so it cannot be shown again. `--json`
prints one JSON object for scripts.
"""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction

from fleet import tokens
from fleet.models import Agent, ApiToken, Fleet
from mcp_bridge.contract.events import ID_MAX_CHARS


class Command(BaseCommand):
    help = "Issue an API token for one fleet and one role; the secret is printed once."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--fleet", required=True, help="Fleet slug.")
        parser.add_argument("--role", required=True, choices=ApiToken.Role.values)
        parser.add_argument("--name", required=True, help="Unique among the fleet's live tokens.")
        parser.add_argument("--agent", help="Agent id an agent-role token speaks for.")
        parser.add_argument(
            "--relay", action="append", default=[], metavar="AGENT",
            help="Agent id a host token relays for; repeat for each agent of the host.",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **o: Any) -> None:
        fleet = Fleet.objects.filter(slug=o["fleet"]).first()
        if fleet is None:
            raise CommandError(f"No fleet {o['fleet']!r}; create it with create_fleet.")
        agent = None
        try:
            with transaction.atomic():  # a refused token registers no agent either
                if o["agent"]:
                    agent = Agent.objects.get_or_create(fleet=fleet, agent_id=o["agent"])[0]
                found = [self._agent(fleet, agent_id) for agent_id in dict.fromkeys(o["relay"])]
                relays = [a for a, _ in found]
                registered = [a.agent_id for a, made in found if made]
                issued = tokens.issue_token(
                    fleet, role=o["role"], name=o["name"], agent=agent, relays=relays
                )
        except IntegrityError:
            raise CommandError(
                f"Fleet {fleet.slug} already has a live token named "
                f"{o['name']!r}; revoke it or pick another name."
            ) from None
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        t = issued.token
        if o["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "fleet": fleet.slug,
                        "name": t.name,
                        "role": t.role,
                        "prefix": t.prefix,
                        "agent": agent.agent_id if agent else None,
                        "relays": sorted(a.agent_id for a in relays),
                        "registered": registered,
                        "token": issued.secret,
                    }
                )
            )
            return
        self.stdout.write(
            f"Issued {t.role} token {t.name!r} for fleet {fleet.slug} (prefix {t.prefix})."
        )
        if relays:
            self.stdout.write(f"It relays for: {', '.join(sorted(a.agent_id for a in relays))}.")
        if registered:
            self.stdout.write(f"Registered new agent(s): {', '.join(registered)}.")
        self.stdout.write("The secret is shown only now; store it somewhere safe:")
        self.stdout.write(issued.secret)

    def _agent(self, fleet: Fleet, agent_id: str) -> tuple[Agent, bool]:
        """The host's agent, registered now if it has never written (a new host's agents
        usually have not); the output names new ones, so a typo shows."""
        if not 0 < len(agent_id) <= ID_MAX_CHARS or not agent_id.isprintable():
            raise CommandError(f"--relay {agent_id!r}: 1-{ID_MAX_CHARS} printable characters.")
        return Agent.objects.get_or_create(fleet=fleet, agent_id=agent_id)
