"""issue_token prints the secret once (and --json for scripts); revoke_token stops it."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from fleet import tokens
from fleet.models import Agent, ApiToken, Fleet


def test_it_issues_a_token_and_prints_the_secret_once(fleet_a: Fleet) -> None:
    out = StringIO()
    call_command("issue_token", fleet="fleet-a", role="agent", name="ci", agent="ada", stdout=out)
    secret = out.getvalue().strip().splitlines()[-1]
    token = tokens.token_for_secret(secret)
    assert token is not None
    assert (token.role, token.agent.agent_id, secret.startswith(token.prefix)) == (
        "agent",
        "ada",
        True,
    )


def test_json_output_is_one_object(fleet_a: Fleet) -> None:
    out = StringIO()
    call_command("issue_token", fleet="fleet-a", role="operator", name="ops", json=True, stdout=out)
    data = json.loads(out.getvalue())
    assert data["role"] == "operator" and data["token"].startswith(data["prefix"])


def test_it_refuses_unknown_fleets_and_duplicate_names(fleet_a: Fleet) -> None:
    with pytest.raises(CommandError, match="No fleet"):
        call_command("issue_token", fleet="nope", role="agent", name="x", stdout=StringIO())
    call_command("issue_token", fleet="fleet-a", role="agent", name="x", stdout=StringIO())
    with pytest.raises(CommandError, match="already has"):
        call_command("issue_token", fleet="fleet-a", role="agent", name="x", stdout=StringIO())


def test_revoke_token_stops_it(fleet_a: Fleet) -> None:
    issued = tokens.issue_token(fleet_a, role="integration", name="hooks")
    call_command("revoke_token", fleet="fleet-a", name="hooks", stdout=StringIO())
    assert tokens.token_for_secret(issued.secret) is None
    assert ApiToken.objects.get(pk=issued.token.pk).revoked_at is not None
    with pytest.raises(CommandError):
        call_command("revoke_token", fleet="fleet-a", name="hooks", stdout=StringIO())


def test_it_issues_a_host_token_for_the_agents_of_a_host(fleet_a: Fleet, ada: Agent) -> None:
    out = StringIO()
    call_command("issue_token", "--relay", "ada", "--relay", "ci-codex", "--relay", "ada",
                 fleet="fleet-a", role="host", name="build-1", json=True, stdout=out)
    data = json.loads(out.getvalue())
    assert (data["role"], data["relays"], data["registered"]) == (
        "host", ["ada", "ci-codex"], ["ci-codex"])
    token = tokens.token_for_secret(data["token"])
    assert token is not None
    assert sorted(token.relays_for.values_list("agent_id", flat=True)) == ["ada", "ci-codex"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--role", "agent", "--agent", "ada", "--relay", "new-1"], "only a host token"),
        (["--role", "host", "--agent", "new-2", "--relay", "ada"], "not bound to one agent"),
        (["--role", "host", "--relay", "bad\x00id"], "printable"),
        (["--role", "host", "--relay", "x" * 129], "printable"),
    ],
)
def test_a_refused_host_token_registers_no_agent(
    fleet_a: Fleet, ada: Agent, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("issue_token", *args, fleet="fleet-a", name="h", stdout=StringIO())
    assert list(Agent.objects.values_list("agent_id", flat=True)) == ["ada"]
    assert not ApiToken.objects.exists()
