from __future__ import annotations

import pytest
from django.db import connection

from ctxlake_site import pgvector_check


@pytest.mark.django_db
def test_it_reports_the_installed_pgvector() -> None:
    installed, available = pgvector_check.pgvector_version(connection)
    assert installed and available


@pytest.mark.django_db
def test_the_migration_names_the_extension_and_how_to_get_it_when_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Simulates a server whose catalog has no 'vector' extension (the only boundary faked).
    monkeypatch.setattr(pgvector_check, "pgvector_version", lambda conn: (None, None))
    with connection.schema_editor() as editor, pytest.raises(pgvector_check.PgvectorMissing) as exc:
        pgvector_check.RequirePgvector().database_forwards("claims", editor, None, None)
    assert "'vector'" in str(exc.value) and "pgvector" in str(exc.value)
    assert "apt-get install postgresql-<major>-pgvector" in str(exc.value)
