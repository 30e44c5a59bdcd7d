"""Make sure pgvector is there, with an error that says what to do when it is not."""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from pgvector.django import VectorExtension

HOW_TO_GET_IT = (
    "ctxlake needs the PostgreSQL extension 'vector' (pgvector, "
    "https://github.com/pgvector/pgvector) in the database named by DATABASE_URL. "
    "Install it on the server (Debian/Ubuntu: "
    "apt-get install postgresql-<major>-pgvector; managed services: enable 'vector' in the "
    "console), or unset DATABASE_URL to use the embedded Postgres, which ships with it."
)


class PgvectorMissing(RuntimeError):
    pass


def pgvector_version(connection: BaseDatabaseWrapper) -> tuple[str | None, str | None]:
    """(installed version, available version) of the 'vector' extension; None when absent."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT installed_version, default_version FROM pg_available_extensions "
            "WHERE name = 'vector'"
        )
        row = cur.fetchone()
    return (row[0], row[1]) if row else (None, None)


class RequirePgvector(VectorExtension):
    """`CREATE EXTENSION vector`, refusing with instructions where the server lacks it."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        installed, available = pgvector_version(schema_editor.connection)
        if installed is None and available is None:
            raise PgvectorMissing(HOW_TO_GET_IT)
        super().database_forwards(app_label, schema_editor, from_state, to_state)
