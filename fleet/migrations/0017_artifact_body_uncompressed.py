from django.db import migrations

# A rendered snapshot.sqlite (~2.75 KB a claim: int8 vectors, FTS pages) barely compresses,
# yet Postgres tried pglz on every render's whole body before storing it: a quarter of a
# one-claim render at 10k claims (bench/pipeline_bench.py: the artifact INSERT 1.03 s with
# compression, 0.79 s without; the render 1.31 s, 1.04 s). EXTERNAL keeps the body out of
# line, uncompressed; the small JSON files lose a little space.
class Migration(migrations.Migration):
    dependencies = [("fleet", "0016_snapshot_cursor")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE fleet_cacheartifact ALTER COLUMN body SET STORAGE EXTERNAL",
            "ALTER TABLE fleet_cacheartifact ALTER COLUMN body SET STORAGE EXTENDED",
        ),
    ]
