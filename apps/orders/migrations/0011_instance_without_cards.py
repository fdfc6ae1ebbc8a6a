from importlib import import_module

from django.db import migrations, models

# SQLite rebuilds the table to add a NOT NULL column, which drops its triggers: the disk trigger
# is made again as 0009 makes it (PostgreSQL adds the column in place and keeps it).
instance_workload = import_module("apps.orders.migrations.0009_instance_workload")


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0010_host_expiry"),
    ]

    operations = [
        migrations.AddField(
            model_name="instance",
            name="without_cards",
            field=models.BooleanField(default=False, verbose_name="without cards"),
        ),
        migrations.RunPython(
            instance_workload.keep_disk_only_grows, instance_workload.keep_disk_only_grows
        ),
    ]
