"""Every write to a handoff row moves its version on, not only the compare-and-swap's.

`fleet.handoffs.update_handoff` swaps on `version`, and after a win it builds the answer
from the copy the caller read at the expected version instead of reading the row again.
Both are right only if nothing changes the row without moving `version`. Before this,
three writers did: a moderator's text release (`claims.release.release_text`), the admin
change form (it saves the `version` it loaded, so a stale form could even move it back)
and the SET_NULL cascades of a deleted session or agent. A row trigger is the one place
that sees them all, raw SQL included. It fires only when a write would leave `version` where
it was or lower; the swap's own `version + 1` passes through untouched.
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION fleet_handoff_bump_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.version := OLD.version + 1;
  RETURN NEW;
END $$;
CREATE TRIGGER fleet_handoff_version BEFORE UPDATE ON fleet_handoff FOR EACH ROW
  WHEN (NEW.version <= OLD.version) EXECUTE FUNCTION fleet_handoff_bump_version();
"""

BACKWARD = """
DROP TRIGGER fleet_handoff_version ON fleet_handoff;
DROP FUNCTION fleet_handoff_bump_version();
"""


class Migration(migrations.Migration):

    dependencies = [
        ("fleet", "0018_artifact_place"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
