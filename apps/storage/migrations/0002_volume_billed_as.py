import django.db.models.deletion
from django.db import migrations, models


def give_each_volume_a_workload(apps, schema_editor):
    """Volumes made before their GB were billed get what their meters point at; their meters
    open at their next change (grow, delete)."""
    Volume = apps.get_model("storage", "Volume")
    Workload = apps.get_model("workloads", "Workload")
    for volume in Volume.objects.filter(billed_as__isnull=True):
        volume.billed_as = Workload.objects.create(
            organization_id=volume.organization_id, kind="volume"
        )
        volume.save(update_fields=["billed_as"])


class Migration(migrations.Migration):
    dependencies = [
        ("storage", "0001_volumes"),
        ("workloads", "0004_volume_kind"),
    ]

    operations = [
        migrations.AddField(
            model_name="volume",
            name="billed_as",
            field=models.OneToOneField(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="billed_volume",
                to="workloads.workload",
                verbose_name="billed as",
            ),
        ),
        migrations.RunPython(give_each_volume_a_workload, migrations.RunPython.noop),
    ]
