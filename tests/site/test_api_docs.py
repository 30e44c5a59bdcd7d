from __future__ import annotations

import re

import pytest
from django.test import Client


@pytest.mark.django_db
def test_the_api_docs_page_and_its_assets_are_served_locally_not_from_a_cdn(client: Client) -> None:
    page = client.get("/api/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "cdn." not in html and "unpkg" not in html
    assets = re.findall(r'(?:src|href)="(/static/[^"]+)"', html)
    assert any(a.endswith("swagger-ui.css") for a in assets)
    for asset in assets:
        response = client.get(asset)
        assert response.status_code == 200, asset
