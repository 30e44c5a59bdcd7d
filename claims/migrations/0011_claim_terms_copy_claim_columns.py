# Hand-written: the copied columns are filled from the claims, then a trigger keeps them.

from django.db import migrations, models

# Every update of a claim row that changes a copied column updates its term rows, in the
# same statement's transaction: status changes have many writers (moderation, merges,
# imports, queryset updates), and a copy that one of them forgot would silently change
# document frequencies. claims.lexicon.COPIES names the same columns.
TRIGGER = """
CREATE FUNCTION claims_term_follows_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE claims_claimterm
       SET status = NEW.status, number = NEW.number, length = NEW.lexical_length,
           fleet_id = NEW.fleet_id
     WHERE claim_id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER claims_term_follows_claim
    AFTER UPDATE OF status, number, lexical_length, fleet_id ON claims_claim
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.number IS DISTINCT FROM NEW.number
          OR OLD.lexical_length IS DISTINCT FROM NEW.lexical_length
          OR OLD.fleet_id IS DISTINCT FROM NEW.fleet_id)
    EXECUTE FUNCTION claims_term_follows_claim();
"""
DROP_TRIGGER = """
DROP TRIGGER IF EXISTS claims_term_follows_claim ON claims_claim;
DROP FUNCTION IF EXISTS claims_term_follows_claim();
"""
FILL = """
UPDATE claims_claimterm AS t
   SET status = c.status, number = c.number, length = c.lexical_length
  FROM claims_claim AS c
 WHERE c.id = t.claim_id;
ANALYZE claims_claimterm;
"""


class Migration(migrations.Migration):

    dependencies = [
        ('claims', '0010_event_sent_back'),
    ]

    operations = [
        migrations.AddField(
            model_name='claimterm',
            name='status',
            field=models.CharField(default='', max_length=10),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='claimterm',
            name='number',
            field=models.PositiveIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='claimterm',
            name='length',
            field=models.PositiveIntegerField(default=0),
            preserve_default=False,
        ),
        migrations.RunSQL(FILL, migrations.RunSQL.noop),
        migrations.RunSQL(TRIGGER, DROP_TRIGGER),
        migrations.RemoveIndex(
            model_name='claimterm',
            name='claims_term_doclist',
        ),
        migrations.AddIndex(
            model_name='claimterm',
            index=models.Index(fields=['fleet', 'term'], include=('claim', 'text_count', 'subject_count', 'status', 'number', 'length'), name='claims_term_doclist'),
        ),
    ]
