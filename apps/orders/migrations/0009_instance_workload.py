import django.db.models.deletion
from django.db import migrations, models

CHUNK = 1000

# SQLite rebuilds the table to make the column NOT NULL, which drops its triggers: the one of
# 0002_disk_only_grows is made again (PostgreSQL alters the table in place and keeps it).
SQLITE_DISK_ONLY_GROWS = """
CREATE TRIGGER instance_disk_only_grows BEFORE UPDATE OF system_disk_gb, data_disk_gb
ON orders_instance
WHEN NEW.system_disk_gb < OLD.system_disk_gb OR NEW.data_disk_gb < OLD.data_disk_gb
BEGIN
    SELECT RAISE(ABORT, 'instance_disk_only_grows: a disk cannot shrink');
END
"""


def keep_disk_only_grows(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS instance_disk_only_grows")
        schema_editor.execute(SQLITE_DISK_ONLY_GROWS)


def give_each_instance_a_workload(apps, schema_editor):
    Instance = apps.get_model("orders", "Instance")
    Workload = apps.get_model("workloads", "Workload")
    rows = list(Instance.objects.order_by("pk").values_list("pk", "organization_id"))
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start : start + CHUNK]
        workloads = Workload.objects.bulk_create(
            [Workload(organization_id=organization, kind="host") for _, organization in chunk]
        )
        Instance.objects.bulk_update(
            [
                Instance(pk=pk, workload_id=workload.pk)
                for (pk, _), workload in zip(chunk, workloads, strict=True)
            ],
            ["workload"],
        )
    _checked_now(schema_editor)


def _checked_now(schema_editor):
    """PostgreSQL checks the rows' new foreign keys at COMMIT; the migration alters the tables
    after, which it refuses while those checks are pending: run them now."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0008_host_samples"),
        ("workloads", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="instance",
            name="workload",
            field=models.OneToOneField(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="instance",
                to="workloads.workload",
                verbose_name="workload",
            ),
        ),
        migrations.RunPython(give_each_instance_a_workload, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="instance",
            name="workload",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="instance",
                to="workloads.workload",
                verbose_name="workload",
            ),
        ),
        migrations.RunPython(keep_disk_only_grows, keep_disk_only_grows),
    ]
