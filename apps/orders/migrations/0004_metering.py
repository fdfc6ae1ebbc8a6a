from importlib import import_module

from django.db import migrations, models

# Adding a column with a default makes SQLite rebuild orders_instance, which drops its triggers.
disk_only_grows = import_module("apps.orders.migrations.0002_disk_only_grows")


def restore_sqlite_trigger(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        disk_only_grows._run(schema_editor, disk_only_grows.SQLITE_DOWN)
        disk_only_grows._run(schema_editor, disk_only_grows.SQLITE_UP)


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0003_approval_policy"),
    ]

    operations = [
        migrations.AddField(
            model_name="instance",
            name="rates",
            field=models.JSONField(blank=True, default=dict, verbose_name="rates"),
        ),
        migrations.RunPython(restore_sqlite_trigger, migrations.RunPython.noop),
        migrations.AddField(
            model_name="task",
            name="hourly_minor",
            field=models.BigIntegerField(default=0, verbose_name="price per hour (minor units)"),
        ),
    ]
