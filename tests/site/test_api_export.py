"""GET /api/v1/fleets/<fleet>/export: a tar for the fleet's operator tokens, nobody else."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from claims.models import Claim
from ctxlake_site.fleet_export import layout
from fleet.models import Agent, Fleet
from tests.fleet.conftest import ApiAs
from tests.site.export_world import build_world, import_

URL = "/api/v1/fleets/fleet-a/export"


@pytest.mark.django_db
def test_it_streams_a_tar_to_an_operator_token(
    fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, api_as: ApiAs
) -> None:
    build_world(fleet_a, ada, bo, mod)
    client = api_as(fleet_a, "operator")

    response = client.get(URL + "?with_vectors=true")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-tar"
    assert response.streaming
    blob = b"".join(response.streaming_content)
    assert client.secret.encode() not in blob  # type: ignore[attr-defined]
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        names = set(tar.getnames())
        manifest = json.load(tar.extractfile(layout.MANIFEST))  # type: ignore[arg-type]
    assert names == {*layout.REQUIRED_FILES, layout.VECTORS, layout.MARKDOWN}
    assert manifest["fleet"] == "fleet-a" and manifest["counts"]["claims"] == 6


@pytest.mark.django_db
@pytest.mark.parametrize(("who", "role", "status"), [
    ("ada", "agent", 403),          # the fleet's own agent token
    ("fleet_a", "integration", 403),
    ("fleet_b", "operator", 404),   # another fleet's operator: the fleet does not exist
    ("cy", "agent", 404),
])
def test_it_refuses_every_other_token(
    fleet_a: Fleet, fleet_b: Fleet, ada: Agent, cy: Agent, api_as: ApiAs, who: str,
    role: str, status: int
) -> None:
    holder = {"ada": ada, "cy": cy, "fleet_a": fleet_a, "fleet_b": fleet_b}[who]

    response = api_as(holder, role).get(URL)

    assert response.status_code == status
    assert not response.streaming
    assert "manifest" not in response.content.decode()


@pytest.mark.django_db
def test_it_refuses_without_a_token(fleet_a: Fleet) -> None:
    from rest_framework.test import APIClient

    assert APIClient().get(URL).status_code == 401


@pytest.mark.django_db
def test_the_rest_tar_imports_into_a_new_fleet(
    fleet_a: Fleet, ada: Agent, bo: Agent, mod: User, api_as: ApiAs, tmp_path: Path
) -> None:
    build_world(fleet_a, ada, bo, mod)
    response = api_as(fleet_a, "operator").get(URL)
    tar = tmp_path / "fleet-a.tar"
    tar.write_bytes(b"".join(response.streaming_content))

    import_(tar, "--fleet", "from-rest")

    assert Claim.objects.filter(fleet__slug="from-rest").count() == 6
