from django.db import migrations

# A fleet's deletion removes its claims first (Django's collector deletes children before
# the parent), and their triggers note each promoted one; no render of that fleet will
# ever prune those rows. This trigger, fired by the fleet row's own deletion at the end
# of the same transaction, removes every change row of the fleet.
FORWARD = """
CREATE FUNCTION claims_forget_fleet_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM claims_snapshotchange WHERE fleet_id = OLD.id;
  RETURN NULL;
END $$;
CREATE TRIGGER fleet_fleet_forget_snapshot_changes AFTER DELETE ON fleet_fleet
  FOR EACH ROW EXECUTE FUNCTION claims_forget_fleet_changes();
DELETE FROM claims_snapshotchange WHERE fleet_id NOT IN (SELECT id FROM fleet_fleet);
"""
BACKWARD = """
DROP TRIGGER fleet_fleet_forget_snapshot_changes ON fleet_fleet;
DROP FUNCTION claims_forget_fleet_changes();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("claims", "0012_snapshot_change"),
        ("fleet", "0016_snapshot_cursor"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
