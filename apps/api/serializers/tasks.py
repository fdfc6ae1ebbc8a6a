from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.api.serializers.fields import InputSerializer, IntegerField
from apps.catalog.models import AcceleratorModel, Image, Region
from apps.orchestration.models import Preemption, Task, TaskPreference
from apps.orchestration.scheduling import (
    MAX_ACCELERATOR_MILLI,
    MAX_COMMAND_CHARS,
    MAX_NAME_CHARS,
    MAX_NODES,
    MAX_PRIORITY,
    MAX_RAM_GB,
    MAX_VCPU,
    MIN_PRIORITY,
)


class TaskRequestSerializer(InputSerializer):
    """Input of a training task. Codes and slugs, not ids: what partners see in the catalog."""

    name = serializers.CharField(max_length=MAX_NAME_CHARS, required=False, default="task")
    image = serializers.SlugRelatedField(slug_field="code", queryset=Image.objects.none())
    command = serializers.CharField(max_length=MAX_COMMAND_CHARS)
    accelerator_model = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=AcceleratorModel.objects.none(),
        required=False,
        allow_null=True,
        help_text="Empty or null: any model the image runs on.",
    )
    accelerator_milli = serializers.IntegerField(
        min_value=1,
        max_value=MAX_ACCELERATOR_MILLI,
        required=False,
        default=1000,
        help_text="Thousandths of an accelerator: 1000 is one card, 250 a quarter share of one "
        "card, 2000 two cards (multiples of 1000 above one card).",
    )
    node_count = serializers.IntegerField(
        min_value=1,
        max_value=MAX_NODES,
        required=False,
        default=1,
        help_text="Nodes of one pool the task runs on together (a gang: all start or none); "
        "accelerator_milli, vcpu and ram_gb are per node, whole cards above one node. Only "
        "pools whose backend runs multi-node jobs (Slurm, simulator) take more than 1.",
    )
    vcpu = serializers.IntegerField(min_value=1, max_value=MAX_VCPU, required=False, default=8)
    ram_gb = serializers.IntegerField(min_value=1, max_value=MAX_RAM_GB, required=False, default=32)
    max_hourly_minor = IntegerField(
        min_value=0,
        required=False,
        allow_null=True,
        help_text="Never placed where it would cost more per hour (minor units); null: any.",
    )
    deadline = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="Still queued at this time, the task fails without running.",
    )
    allowed_regions = serializers.SlugRelatedField(
        slug_field="code",
        queryset=Region.objects.none(),
        many=True,
        required=False,
        help_text="Region codes; empty: any region of the park.",
    )
    preference = serializers.ChoiceField(
        choices=TaskPreference.choices, required=False, default=TaskPreference.BALANCED
    )
    priority = serializers.IntegerField(
        min_value=MIN_PRIORITY,
        max_value=MAX_PRIORITY,
        required=False,
        default=0,
        help_text="0 is normal; below 0 lets other tasks go first.",
    )
    preemptible = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Cheaper (the park's discount); the park may stop it to make room for a task "
        "that is not preemptible and queue it again, billed up to the stop.",
    )

    def __init__(self, *args, park=None, **kwargs):
        super().__init__(*args, **kwargs)
        if park is not None:
            self.fields["image"].queryset = Image.objects.filter(
                is_active=True, park=park, organization=None
            )
            self.fields["accelerator_model"].queryset = AcceleratorModel.objects.filter(
                pools__backend__park=park
            ).distinct()
            self.fields["allowed_regions"].child_relation.queryset = Region.objects.filter(
                park=park
            )


class PreemptionSerializer(serializers.ModelSerializer):
    preempted_by = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)

    class Meta:
        model = Preemption
        fields = ["at", "billed_seconds", "hourly_minor", "nodes", "preempted_by"]
        read_only_fields = fields


class TaskSerializer(serializers.ModelSerializer):
    image = serializers.CharField(source="image.code", read_only=True)
    accelerator_model = serializers.CharField(
        source="accelerator_model.slug", read_only=True, allow_null=True
    )
    allowed_regions = serializers.SlugRelatedField(slug_field="code", many=True, read_only=True)
    pool = serializers.CharField(source="pool.name", read_only=True, allow_null=True)
    region = serializers.CharField(source="pool.region.code", read_only=True, allow_null=True)
    node = serializers.CharField(source="node.hostname", read_only=True, allow_null=True)
    currency = serializers.CharField(source="organization.park.currency", read_only=True)
    queue_position = serializers.SerializerMethodField(
        help_text="1-based place in the park's start order while queued; null otherwise."
    )
    placement = serializers.SerializerMethodField(
        help_text="Why it runs where it does, in the caller's language; null until placed."
    )
    image_digest = serializers.CharField(
        read_only=True,
        help_text="The digest of the build of `image` it was handed to its backend to run in, "
        "as its pool reported it; empty until then, and where its pool runs no images of its "
        "own (the command runs as the backend runs it).",
    )
    nodes = serializers.SerializerMethodField(
        help_text="Every node it was placed on, by hostname (several for a multi-node task); "
        "empty until placed."
    )
    preemptions = serializers.SerializerMethodField(
        help_text="Each time it was preempted and requeued, latest first: when, the seconds "
        "billed for that run, the nodes it gave up and the task it made room for."
    )

    class Meta:
        model = Task
        fields = [
            "id",
            "name",
            "state",
            "image",
            "image_digest",
            "command",
            "accelerator_model",
            "accelerator_milli",
            "node_count",
            "nodes",
            "vcpu",
            "ram_gb",
            "max_hourly_minor",
            "hourly_minor",
            "currency",
            "deadline",
            "allowed_regions",
            "preference",
            "priority",
            "preemptible",
            "preemptions",
            "queue_position",
            "pool",
            "region",
            "node",
            "placement",
            "logs",
            "submitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_queue_position(self, task) -> int | None:
        return self.context.get("queue_positions", {}).get(task.pk)

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_nodes(self, task) -> list[str]:
        placements = sorted(task.workload.placements.all(), key=lambda p: (p.created_at, p.pk))
        if not placements:
            return []
        gang = placements[-1].gang
        if gang:
            return list(gang["nodes"])
        return [task.node.hostname] if task.node_id else []

    @extend_schema_field(PreemptionSerializer(many=True))
    def get_preemptions(self, task) -> list[dict]:
        return PreemptionSerializer(task.preemptions.all(), many=True).data

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_placement(self, task) -> str | None:
        placements = sorted(task.workload.placements.all(), key=lambda p: (p.created_at, p.pk))
        return placements[-1].describe() if placements else None
