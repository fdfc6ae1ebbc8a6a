from django.db import migrations


def data_disks_as_volumes(apps, schema_editor):
    """Each host's data disk on an agent's server becomes the volume it is for hosts ordered
    now: attached at /data, the data disk of its host, which still bills and counts it. The
    agent takes the host's data.img as the volume's image when it first lists it (`adopt`);
    until then the volume is `creating`, and ready once the agent reports it. Hosts elsewhere
    (simulated, Slurm) keep their disk with the host, as their backends do."""
    Instance = apps.get_model("orders", "Instance")
    Volume = apps.get_model("storage", "Volume")
    Workload = apps.get_model("workloads", "Workload")
    hosts = (
        Instance.objects.exclude(state="released")
        .filter(data_disk_gb__gt=0, node__pool__backend__driver="agent")
        .exclude(workload__data_disk__isnull=False)
        .select_related("node__pool")
        .order_by("pk")
    )
    for instance in hosts:
        Volume.objects.create(
            organization_id=instance.organization_id,
            region_id=instance.node.pool.region_id,
            node_id=instance.node_id,
            name=f"{instance.name}-data"[:63],
            size_gb=instance.data_disk_gb,
            workload_id=instance.workload_id,
            mount_path="/data",
            data_disk_of_id=instance.workload_id,
            billed_as=Workload.objects.create(
                organization_id=instance.organization_id, kind="volume"
            ),
        )


class Migration(migrations.Migration):
    dependencies = [
        ("orders", "0011_instance_without_cards"),
        ("storage", "0003_volume_data_disk"),
    ]

    # Back: the volumes stay, attached where they are (their images hold the tenants' data,
    # which an agent deletes with a volume no longer listed).
    operations = [migrations.RunPython(data_disks_as_volumes, migrations.RunPython.noop)]
