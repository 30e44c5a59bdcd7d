"""Claim vectors stored inline in the claim's row (storage PLAIN), not in the TOAST table.

pgvector gives `vector` EXTERNAL storage: a 384-dim vector (1,544 bytes) plus a claim's
text and columns passes the 2 KB TOAST threshold, so the vector went out of line and every
distance computed over a row fetched it through the TOAST index: three buffers a row, and
most of a neighbour scan's time (measured on 2026-12-05, one label scan over 1,600 claims:
4,931 buffers and ~4 ms of Postgres out of line, ~2 ms inline). PLAIN keeps
the vector in the row; a long text is compressed or moved out instead.

Rows already stored keep their out-of-line vector until they are rewritten: re-embedding
(`manage.py reembed_claims`) or `VACUUM FULL claims_claim` moves them in. The migration
rewrites nothing, so it takes no long lock on a large table.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("claims", "0014_claim_term_no_key_checks")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE claims_claim ALTER COLUMN embedding SET STORAGE PLAIN",
            reverse_sql="ALTER TABLE claims_claim ALTER COLUMN embedding SET STORAGE EXTERNAL",
        ),
    ]
