"""Meters, usage records, holds, suspensions for funds and invoice lines point at the Workload
of the host or task they are for, where they pointed at the instance or the task: no foreign
key points up a floor (docs/architecture.md)."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery

# (model, related_name, null, the subjects it pointed at)
REPOINTED = [
    ("meter", "meters", False, ("instance", "task")),
    ("usagerecord", "usage", False, ("instance", "task")),
    ("fundssuspension", "funds_suspensions", False, ("instance",)),
    ("invoiceline", "+", True, ("instance", "task")),
]
SUBJECTS = {"instance": ("orders", "Instance", "host"), "task": ("orchestration", "Task", "task")}


def _subject(apps, name):
    app, model, _kind = SUBJECTS[name]
    return apps.get_model(app, model)


def point_at_workloads(apps, schema_editor):
    for model_name, _related, _null, subjects in [*REPOINTED, ("hold", None, False, ("instance",))]:
        model = apps.get_model("billing", model_name)
        for name in subjects:
            owner = _subject(apps, name)
            model.objects.filter(**{f"{name}__isnull": False}).update(
                workload=Subquery(
                    owner.objects.filter(pk=OuterRef(f"{name}_id")).values("workload_id")[:1]
                )
            )
    _checked_now(schema_editor)


def point_back(apps, schema_editor):
    for model_name, _related, _null, subjects in [*REPOINTED, ("hold", None, False, ("instance",))]:
        model = apps.get_model("billing", model_name)
        for name in subjects:
            owner = _subject(apps, name)
            model.objects.filter(workload__kind=SUBJECTS[name][2]).update(
                **{
                    name: Subquery(
                        owner.objects.filter(workload_id=OuterRef("workload_id")).values("pk")[:1]
                    )
                }
            )
    _checked_now(schema_editor)


def _workload(related_name, *, null):
    return models.ForeignKey(
        null=null,
        blank=null,
        on_delete=django.db.models.deletion.PROTECT,
        related_name=related_name,
        to="workloads.workload",
        verbose_name="workload",
    )


def _hold_workload(*, null):
    return models.OneToOneField(
        null=null,
        on_delete=django.db.models.deletion.PROTECT,
        related_name="hold",
        to="workloads.workload",
        verbose_name="workload",
    )


def _checked_now(schema_editor):
    """PostgreSQL checks the rows' new foreign keys at COMMIT; the migration alters the tables
    after, which it refuses while those checks are pending: run them now."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_invoice_line_hourly_minor"),
        ("orders", "0009_instance_workload"),
        ("orchestration", "0011_workloads"),
        ("workloads", "0001_initial"),
    ]

    operations = [
        *[
            migrations.AddField(
                model_name=model, name="workload", field=_workload(related, null=True)
            )
            for model, related, _null, _subjects in REPOINTED
        ],
        migrations.AddField(model_name="hold", name="workload", field=_hold_workload(null=True)),
        migrations.RemoveConstraint(model_name="meter", name="meter_one_subject"),
        migrations.RemoveConstraint(model_name="meter", name="meter_one_open_per_instance_kind"),
        migrations.RemoveConstraint(model_name="meter", name="meter_one_open_per_task_kind"),
        migrations.RemoveConstraint(model_name="usagerecord", name="usage_one_subject"),
        migrations.RemoveConstraint(
            model_name="fundssuspension", name="suspension_one_open_per_instance"
        ),
        migrations.RunPython(point_at_workloads, point_back),
        *[
            migrations.RemoveField(model_name=model, name=subject)
            for model, _related, _null, subjects in REPOINTED
            for subject in subjects
        ],
        migrations.RemoveField(model_name="hold", name="instance"),
        *[
            migrations.AlterField(
                model_name=model, name="workload", field=_workload(related, null=null)
            )
            for model, related, null, _subjects in REPOINTED
            if not null
        ],
        migrations.AlterField(model_name="hold", name="workload", field=_hold_workload(null=False)),
        migrations.AddConstraint(
            model_name="meter",
            constraint=models.UniqueConstraint(
                condition=Q(ended_at__isnull=True),
                fields=("workload", "kind"),
                name="meter_one_open_per_workload_kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="fundssuspension",
            constraint=models.UniqueConstraint(
                condition=Q(resumed_at__isnull=True),
                fields=("workload",),
                name="suspension_one_open_per_workload",
            ),
        ),
    ]
