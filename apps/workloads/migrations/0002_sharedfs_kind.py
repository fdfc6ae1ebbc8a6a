from importlib import import_module

from django.db import migrations, models

# SQLite rebuilds the workloads table to change its check constraint, which a trigger on
# allocations reads (orchestration 0011): dropped for the rebuild, made again after it.
_triggers = import_module("apps.orchestration.migrations.0011_workloads")


def _on_sqlite(statements):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            for statement in statements["sqlite"]:
                schema_editor.execute(statement, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0003_organization_terms_accepted_at"),
        ("workloads", "0001_initial"),
        ("orchestration", "0014_backend_endpoint"),
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
                ],
                max_length=8,
                verbose_name="kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="workload",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["host", "task", "sharedfs"])),
                name="workload_kind_known",
            ),
        ),
        migrations.RunPython(
            _on_sqlite(_triggers.SHARE_IS_A_TASKS), _on_sqlite(_triggers.DROP_SHARE_IS_A_TASKS)
        ),
    ]
