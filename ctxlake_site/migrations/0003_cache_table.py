"""The database cache table (settings.CACHES, `ctxlake_cache`) made by `migrate`.

The change feed keeps each fleet's latest render version there (fleet.change_feed), and a
render announces itself in it: a deploy that runs only `migrate` (docs/deployment.md) must
have it, not only `./ctxlake up` (setup_local runs createcachetable too; both are no-ops
when the table exists).
"""

from typing import Any

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps: Any, schema_editor: Any) -> None:
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("ctxlake_site", "0002_ratewindow_unlogged")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
