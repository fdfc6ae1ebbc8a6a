"""Allocations and placements point at the Workload of the host or task they are for, where
they pointed at the instance or the task (and a placement at the order): no foreign key points
up a floor (docs/architecture.md)."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Q, Subquery

CHUNK = 1000


def give_each_task_a_workload(apps, schema_editor):
    Task = apps.get_model("orchestration", "Task")
    Workload = apps.get_model("workloads", "Workload")
    rows = list(Task.objects.order_by("pk").values_list("pk", "organization_id"))
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start : start + CHUNK]
        workloads = Workload.objects.bulk_create(
            [Workload(organization_id=organization, kind="task") for _, organization in chunk]
        )
        Task.objects.bulk_update(
            [
                Task(pk=pk, workload_id=workload.pk)
                for (pk, _), workload in zip(chunk, workloads, strict=True)
            ],
            ["workload"],
        )
    _checked_now(schema_editor)


def _workload_of(model, column):
    return Subquery(model.objects.filter(pk=OuterRef(column)).values("workload_id")[:1])


def point_at_workloads(apps, schema_editor):
    Instance = apps.get_model("orders", "Instance")
    Order = apps.get_model("orders", "Order")
    Task = apps.get_model("orchestration", "Task")
    Allocation = apps.get_model("orchestration", "Allocation")
    Placement = apps.get_model("orchestration", "Placement")
    Allocation.objects.filter(instance__isnull=False).update(
        workload=_workload_of(Instance, "instance_id")
    )
    Allocation.objects.filter(task__isnull=False).update(workload=_workload_of(Task, "task_id"))
    Placement.objects.filter(task__isnull=False).update(workload=_workload_of(Task, "task_id"))
    # An order's placement chose the node of the host it created.
    Placement.objects.filter(task__isnull=True, order__instance__isnull=False).update(
        workload=Subquery(
            Order.objects.filter(pk=OuterRef("order_id")).values("instance__workload_id")[:1]
        )
    )
    # None is kept without a host (an order's placement is made with its host): nothing to show.
    Placement.objects.filter(workload__isnull=True).delete()
    _checked_now(schema_editor)


def point_back(apps, schema_editor):
    Instance = apps.get_model("orders", "Instance")
    Order = apps.get_model("orders", "Order")
    Task = apps.get_model("orchestration", "Task")
    Allocation = apps.get_model("orchestration", "Allocation")
    Placement = apps.get_model("orchestration", "Placement")

    def owner(model):
        return Subquery(model.objects.filter(workload_id=OuterRef("workload_id")).values("pk")[:1])

    Allocation.objects.filter(workload__kind="host").update(instance=owner(Instance))
    Allocation.objects.filter(workload__kind="task").update(task=owner(Task))
    Placement.objects.filter(workload__kind="task").update(task=owner(Task))
    Placement.objects.filter(workload__kind="host").update(
        order=Subquery(
            Order.objects.filter(
                instance__workload_id=OuterRef("workload_id"), kind="create"
            ).values("pk")[:1]
        )
    )
    _checked_now(schema_editor)


# Only a training task holds a share of a card (hosts take whole cards). The check constraint
# said so with the task's column; the workload's kind is in another table, so a trigger does.
SHARE_IS_A_TASKS = {
    "postgresql": [
        """
CREATE FUNCTION orchestration_allocation_share_is_a_tasks() RETURNS trigger AS $$
BEGIN
    IF NEW.share_milli > 0 AND NOT EXISTS (
        SELECT 1 FROM workloads_workload WHERE id = NEW.workload_id AND kind = 'task'
    ) THEN
        RAISE EXCEPTION 'allocation_share_is_a_tasks: only a training task holds a share'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql
""",
        """
CREATE TRIGGER allocation_share_is_a_tasks
BEFORE INSERT OR UPDATE OF share_milli, workload_id ON orchestration_allocation
FOR EACH ROW EXECUTE FUNCTION orchestration_allocation_share_is_a_tasks()
""",
    ],
    "sqlite": [
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
    ],
}
DROP_SHARE_IS_A_TASKS = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS allocation_share_is_a_tasks ON orchestration_allocation",
        "DROP FUNCTION IF EXISTS orchestration_allocation_share_is_a_tasks()",
    ],
    "sqlite": [
        "DROP TRIGGER IF EXISTS allocation_share_is_a_tasks_on_insert",
        "DROP TRIGGER IF EXISTS allocation_share_is_a_tasks_on_update",
    ],
}


def _run(statements):
    def run(apps, schema_editor):
        for statement in statements[schema_editor.connection.vendor]:
            schema_editor.execute(statement, params=None)

    return run


def _workload(related_name, *, null):
    return models.ForeignKey(
        null=null,
        on_delete=django.db.models.deletion.CASCADE,
        related_name=related_name,
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
        ("orchestration", "0010_pool_partner"),
        ("orders", "0009_instance_workload"),
        ("workloads", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="workload",
            field=models.OneToOneField(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="task",
                to="workloads.workload",
                verbose_name="workload",
            ),
        ),
        migrations.RunPython(give_each_task_a_workload, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="task",
            name="workload",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="task",
                to="workloads.workload",
                verbose_name="workload",
            ),
        ),
        migrations.AddField(
            model_name="allocation", name="workload", field=_workload("allocations", null=True)
        ),
        migrations.AddField(
            model_name="placement", name="workload", field=_workload("placements", null=True)
        ),
        migrations.RemoveConstraint(model_name="allocation", name="allocation_share_of_one_card"),
        migrations.RemoveConstraint(model_name="allocation", name="allocation_one_holder"),
        migrations.RemoveConstraint(
            model_name="allocation", name="allocation_one_live_per_instance"
        ),
        migrations.RemoveConstraint(model_name="allocation", name="allocation_one_live_per_task"),
        migrations.RemoveConstraint(model_name="placement", name="placement_has_subject"),
        migrations.RunPython(point_at_workloads, point_back),
        migrations.RemoveField(model_name="allocation", name="instance"),
        migrations.RemoveField(model_name="allocation", name="task"),
        migrations.RemoveField(model_name="placement", name="order"),
        migrations.RemoveField(model_name="placement", name="task"),
        migrations.AlterField(
            model_name="allocation", name="workload", field=_workload("allocations", null=False)
        ),
        migrations.AlterField(
            model_name="placement", name="workload", field=_workload("placements", null=False)
        ),
        migrations.AddConstraint(
            model_name="allocation",
            constraint=models.CheckConstraint(
                condition=Q(share_milli=0, shared_accelerator__isnull=True)
                | Q(share_milli__gt=0, share_milli__lt=1000, shared_accelerator__isnull=False),
                name="allocation_share_of_one_card",
            ),
        ),
        migrations.AddConstraint(
            model_name="allocation",
            constraint=models.UniqueConstraint(
                condition=Q(released_at__isnull=True),
                fields=("workload",),
                name="allocation_one_live_per_workload",
            ),
        ),
        migrations.RunPython(_run(SHARE_IS_A_TASKS), _run(DROP_SHARE_IS_A_TASKS)),
    ]
