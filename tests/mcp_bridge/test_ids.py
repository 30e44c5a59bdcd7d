"""contract.ids: the uuid-free event and session ids say exactly what `uuid` would."""

from __future__ import annotations

import uuid

import pytest

from mcp_bridge import contract
from mcp_bridge.contract.ids import canonical_uuid, derived_uuid, random_uuid


def test_random_ids_are_version_4_uuids_in_canonical_form() -> None:
    made = [random_uuid() for _ in range(2000)]
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert (str(parsed), parsed.version, parsed.variant) == (text, 4, uuid.RFC_4122)


@pytest.mark.parametrize("form", [str.upper, lambda t: "{" + t + "}",
                                  lambda t: "urn:uuid:" + t, lambda t: t.replace("-", "")])
def test_other_spellings_are_normalised_as_uuid_does(form: object) -> None:
    text = random_uuid()
    assert canonical_uuid(form(text)) == str(uuid.UUID(form(text))) == text  # type: ignore[operator]


@pytest.mark.parametrize("bad", ["", "x" * 36, "g" * 8 + "-0000-0000-0000-" + "0" * 12,
                                 "0" * 8 + "-0000-0000-0000-" + "0" * 11 + "\x00", None, 10**40,
                                 "\ud800" * 36, "0" * 8 + "-0000-0000-0000-" + "0" * 13])
def test_anything_else_is_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        canonical_uuid(bad)


def test_the_envelope_check_takes_and_normalises_ids_as_before() -> None:
    event = {"v": contract.SPOOL_VERSION, "id": random_uuid().upper(), "kind": "lease.claim",
             "fleet": "acme", "agent": "ada", "session": None, "at": "2026-12-04T00:00:00Z",
             "payload": {}}
    assert contract.envelope_problem(event, "acme", fleet_source="test") is None
    assert event["id"] == event["id"].lower()
    event["id"] = "not-a-uuid"
    assert contract.envelope_problem(event, "acme", fleet_source="test") == "id must be a UUID"


def test_a_derived_uuid_is_a_version_4_uuid_named_by_its_parts() -> None:
    ids = {derived_uuid(f"call-{i}", "bo") for i in range(2000)}
    assert len(ids) == 2000
    assert derived_uuid("call-1", "bo") == derived_uuid("call-1", "bo")
    assert derived_uuid("call-1", "bo") != derived_uuid("call-1", "cy")
    for text in ids:
        parsed = uuid.UUID(text)
        assert (str(parsed), parsed.version, parsed.variant) == (text, 4, uuid.RFC_4122)
