"""Training tasks through the partner API: the same services as the pages."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_actor, current_organization
from apps.api.serializers.tasks import TaskRequestSerializer, TaskSerializer
from apps.orchestration import scheduling, selectors
from apps.orchestration.models import Task
from apps.tenants.roles import Action
from apps.tenants.selectors import for_organization


class TaskViewSet(
    LoamAPIMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """The organization's training tasks: queued until the scheduler places them on the pool
    that fits best (region, performance, energy, price, the task's preference)."""

    queryset = Task.objects.none()
    serializer_class = TaskSerializer
    required_actions = {
        "list": Action.VIEW,
        "retrieve": Action.VIEW,
        "create": Action.ORDER,
        "cancel": Action.ORDER,
    }
    filterset_fields = ["state", "preference"]
    ordering_fields = ["submitted_at", "state", "priority"]

    def get_queryset(self):
        return selectors.task_with_details(
            for_organization(Task, current_organization(self.request)).select_related(
                "image", "accelerator_model", "pool__region", "node", "organization__park"
            )
        ).order_by("-submitted_at", "-pk")

    def get_serializer_context(self):
        context = super().get_serializer_context()
        organization = current_organization(self.request)
        if organization is not None:
            context["queue_positions"] = selectors.queue_positions_in(organization.park)
        return context

    @extend_schema(request=TaskRequestSerializer, responses={201: TaskSerializer})
    def create(self, request):
        """Submit a training task; it is queued and placed when it fits. Send an
        Idempotency-Key to retry safely."""
        organization = current_organization(request)
        serializer = TaskRequestSerializer(data=request.data, park=organization.park)
        serializer.is_valid(raise_exception=True)
        task = scheduling.submit_task(
            organization=organization, actor=current_actor(request), data=serializer.validated_data
        )
        task = self.get_queryset().get(pk=task.pk)
        return Response(
            TaskSerializer(task, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(request=None, responses=TaskSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel a queued, placed or running task; what it held goes back to the pool. A
        finished task answers 409."""
        task = scheduling.cancel_task(task=self.get_object(), actor=current_actor(request))
        task = self.get_queryset().get(pk=task.pk)
        return Response(TaskSerializer(task, context=self.get_serializer_context()).data)
