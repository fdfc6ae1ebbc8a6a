"""A disk never shrinks: a trigger refuses an UPDATE that lowers either disk size.

A check constraint sees one row version only, so this is a trigger, written once per database we
run on. Both raise an integrity error that names the rule.
"""

from django.db import migrations

POSTGRES_UP = [
    """
CREATE FUNCTION orders_instance_disk_only_grows() RETURNS trigger AS $$
BEGIN
    IF NEW.system_disk_gb < OLD.system_disk_gb OR NEW.data_disk_gb < OLD.data_disk_gb THEN
        RAISE EXCEPTION 'instance_disk_only_grows: a disk cannot shrink'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql
""",
    """
CREATE TRIGGER instance_disk_only_grows BEFORE UPDATE ON orders_instance
    FOR EACH ROW EXECUTE FUNCTION orders_instance_disk_only_grows()
""",
]
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS instance_disk_only_grows ON orders_instance",
    "DROP FUNCTION IF EXISTS orders_instance_disk_only_grows()",
]
SQLITE_UP = ["""
CREATE TRIGGER instance_disk_only_grows BEFORE UPDATE OF system_disk_gb, data_disk_gb
ON orders_instance
WHEN NEW.system_disk_gb < OLD.system_disk_gb OR NEW.data_disk_gb < OLD.data_disk_gb
BEGIN
    SELECT RAISE(ABORT, 'instance_disk_only_grows: a disk cannot shrink');
END
"""]
SQLITE_DOWN = ["DROP TRIGGER IF EXISTS instance_disk_only_grows"]


def forwards(apps, schema_editor):
    _run(schema_editor, POSTGRES_UP if _is_postgres(schema_editor) else SQLITE_UP)


def backwards(apps, schema_editor):
    _run(schema_editor, POSTGRES_DOWN if _is_postgres(schema_editor) else SQLITE_DOWN)


def _is_postgres(schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor not in ("postgresql", "sqlite"):
        raise NotImplementedError(f"No disk-only-grows trigger for {vendor}")
    return vendor == "postgresql"


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement, params=None)


class Migration(migrations.Migration):
    dependencies = [("orders", "0001_initial")]

    operations = [migrations.RunPython(forwards, backwards)]
