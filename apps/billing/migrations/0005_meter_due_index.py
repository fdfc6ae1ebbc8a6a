"""An index on the meters metering still owes, so that finding them does not scan the closed
meters' history."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0004_task_moved_to_orchestration"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="meter",
            index=models.Index(
                condition=models.Q(
                    ("ended_at__isnull", True),
                    ("metered_until__lt", models.F("ended_at")),
                    _connector="OR",
                ),
                fields=["organization", "metered_until"],
                name="meter_due",
            ),
        ),
    ]
