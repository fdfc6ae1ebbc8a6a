from importlib import import_module

from django.db import migrations, models

# SQLite changes a check constraint by rebuilding the table, which it refuses while a trigger
# names the table: orchestration's allocation_share_is_a_tasks (its migration 0011_workloads)
# is dropped for the rebuild and made again after it, as 0002_sharedfs_kind does.
_sharedfs_kind = import_module("apps.workloads.migrations.0002_sharedfs_kind")
_triggers, _on_sqlite = _sharedfs_kind._triggers, _sharedfs_kind._on_sqlite


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0002_sharedfs_kind"),
    ]

    operations = [
        migrations.RunPython(
            _on_sqlite(_triggers.DROP_SHARE_IS_A_TASKS), _on_sqlite(_triggers.SHARE_IS_A_TASKS)
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
            _on_sqlite(_triggers.SHARE_IS_A_TASKS), _on_sqlite(_triggers.DROP_SHARE_IS_A_TASKS)
        ),
    ]
