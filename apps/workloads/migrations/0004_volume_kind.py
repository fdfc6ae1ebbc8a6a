from importlib import import_module

from django.db import migrations, models

# SQLite rebuilds the workloads table to change its check constraint, which a trigger on
# allocations reads (orchestration 0011): dropped for the rebuild, made again after it, as
# 0002_sharedfs_kind does.
_sharedfs_kind = import_module("apps.workloads.migrations.0002_sharedfs_kind")
_triggers, _on_sqlite = _sharedfs_kind._triggers, _sharedfs_kind._on_sqlite


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0003_workload_kind_image"),
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
                    ("volume", "Cloud disk"),
                ],
                max_length=8,
                verbose_name="kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="workload",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["host", "task", "sharedfs", "image", "volume"])),
                name="workload_kind_known",
            ),
        ),
        migrations.RunPython(
            _on_sqlite(_triggers.SHARE_IS_A_TASKS), _on_sqlite(_triggers.DROP_SHARE_IS_A_TASKS)
        ),
    ]
