"""RateWindow becomes an UNLOGGED table: counting a request no longer waits for a WAL flush.

Every API request upserts its caller's counter in its own transaction; on a logged table
that commit waits for the write-ahead log to reach disk (1-3 ms here, more under load),
longer than the upsert itself. An unlogged table writes no WAL, so its commits do not
wait. What it gives up: after a crash Postgres empties it (the current minute's counts
restart from zero) and a streaming replica does not have it — acceptable for counters
that live a minute or two.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("ctxlake_site", "0001_ratewindow")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE ctxlake_site_ratewindow SET UNLOGGED",
            reverse_sql="ALTER TABLE ctxlake_site_ratewindow SET LOGGED",
        )
    ]
