"""`manage.py setup_local`: everything a first local run needs, idempotently.

Migrates, creates the cache table, a demo fleet with a little data to look at, and a
local admin login whose password is kept in $CTXLAKE_HOME/admin-password (0600). Only the
file's path is printed, never the password: `./ctxlake up` runs this on every start, and
its output lands wherever the server's does (a terminal, or a service manager's journal).
"""

from __future__ import annotations

import secrets
from argparse import ArgumentParser
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from claims import moderation
from ctxlake_site import paths, workers
from fleet import handoffs, leases
from fleet.models import Agent, Fleet, Session

ADMIN_USER = "admin"


class Command(BaseCommand):
    help = "Migrate, create the demo fleet and a local admin login (idempotent)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--no-demo", action="store_true", help="Skip the demo fleet.")

    def handle(self, *args: Any, no_demo: bool = False, **options: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        call_command("createcachetable", verbosity=0)
        workers.ensure_schedules()
        if not no_demo:
            self._demo_fleet()
        workers.render_all_fleets()  # agents on this machine get a cache right away
        secret_file = self._admin_login()
        self.stdout.write(f"admin login: {ADMIN_USER}, password in {secret_file}")

    def _admin_login(self) -> Path:
        """The admin login exists and its password is in the file returned."""
        secret_file = paths.home() / "admin-password"
        User = get_user_model()
        user = User.objects.filter(username=ADMIN_USER).first()
        if user is not None and secret_file.exists():
            return secret_file
        password = secrets.token_urlsafe(12)
        if user is None:
            User.objects.create_superuser(ADMIN_USER, "", password)
        else:  # the login exists but its password file was lost: issue a new one
            user.set_password(password)
            user.save(update_fields=["password"])
        secret_file.parent.mkdir(parents=True, exist_ok=True)
        secret_file.touch(mode=0o600)
        secret_file.write_text(password)
        return secret_file

    @transaction.atomic
    def _demo_fleet(self) -> None:
        fleet, created = Fleet.objects.get_or_create(
            slug="demo", defaults={"name": "Demo fleet", "memory_mode": "live"}
        )
        if not created:
            return
        ada = Agent.objects.create(fleet=fleet, agent_id="ada", runtime="claude-code", host="local")
        bo = Agent.objects.create(fleet=fleet, agent_id="bo", runtime="codex", host="local")
        s1 = Session.objects.create(fleet=fleet, agent=ada, session_id="demo-s1", repo="shop")
        Session.objects.create(fleet=fleet, agent=bo, session_id="demo-s2", repo="shop")
        leases.claim_paths(
            ada,
            ["src/payments/**"],
            ttl=timedelta(hours=8),
            reason="refactoring the refund flow",
            session=s1,
        )
        leases.claim_paths(
            bo, ["src/payments/stripe.py"], ttl=timedelta(hours=8), reason="fixing webhook retries"
        )
        handoffs.create_handoff(
            ada,
            summary="Refund flow half-migrated to the new client.",
            next_steps="Finish src/payments/refunds.py; tests are red.",
            session=s1,
        )
        # as an agent's proposal is filed: evidence, the event, and an embedding pass queued
        # for when the workers start (so the demo's memory_search is hybrid, as a fleet's is)
        moderation.propose_claim(
            fleet,
            type="gotcha",
            subject="payments tests",
            by_agent=ada,
            text="The payments tests need STRIPE_API_BASE pointed at the local mock, "
            "or they call the real sandbox and time out.",
            evidence=[{"session_id": "demo-s1", "message_id": "m-12", "repo": "shop",
                       "path": "src/payments/tests/conftest.py"}],
        )
