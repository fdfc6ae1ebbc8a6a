import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("tenants", "0003_organization_terms_accepted_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="Workload",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[("host", "GPU cloud host"), ("task", "Training task")],
                        max_length=8,
                        verbose_name="kind",
                    ),
                ),
                (
                    "organization",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="workloads",
                        to="tenants.organization",
                        verbose_name="organization",
                    ),
                ),
            ],
            options={
                "verbose_name": "workload",
                "verbose_name_plural": "workloads",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("kind__in", ["host", "task"])),
                        name="workload_kind_known",
                    )
                ],
            },
        ),
    ]
