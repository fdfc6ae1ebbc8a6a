from django.db import migrations, models

# SQLite changes a check constraint by rebuilding the table, which it refuses while a trigger
# names the table: orchestration's allocation_share_is_a_tasks (its migration 0011_workloads)
# is dropped for the rebuild and made again after it, exactly as that migration makes it.
SQLITE_SHARE_TRIGGERS = [
    f"""
CREATE TRIGGER allocation_share_is_a_tasks_on_{event.split()[0].lower()}
BEFORE {event} ON orchestration_allocation
WHEN NEW.share_milli > 0 AND NOT EXISTS (
    SELECT 1 FROM workloads_workload WHERE id = NEW.workload_id AND kind = 'task'
)
BEGIN
    SELECT RAISE(ABORT, 'allocation_share_is_a_tasks: only a training task holds a share');
END
"""
    for event in ("INSERT", "UPDATE OF share_milli, workload_id")
]
SQLITE_DROP_SHARE_TRIGGERS = [
    "DROP TRIGGER IF EXISTS allocation_share_is_a_tasks_on_insert",
    "DROP TRIGGER IF EXISTS allocation_share_is_a_tasks_on_update",
]


def _on_sqlite(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for statement in statements:
                schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0002_sharedfs_kind"),
    ]

    operations = [
        migrations.RunPython(
            _on_sqlite(SQLITE_DROP_SHARE_TRIGGERS), _on_sqlite(SQLITE_SHARE_TRIGGERS)
        ),
        migrations.RemoveConstraint(
            model_name="workload",
            name="workload_kind_known",
        ),
        migrations.AlterField(
            model_name="workload",
            name="kind",
            field=models.CharField(
                choices=[
                    ("host", "GPU cloud host"),
                    ("task", "Training task"),
                    ("sharedfs", "Shared file storage"),
                    ("image", "Saved image"),
                ],
                max_length=8,
                verbose_name="kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="workload",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["host", "task", "sharedfs", "image"])),
                name="workload_kind_known",
            ),
        ),
        migrations.RunPython(
            _on_sqlite(SQLITE_SHARE_TRIGGERS), _on_sqlite(SQLITE_DROP_SHARE_TRIGGERS)
        ),
    ]
