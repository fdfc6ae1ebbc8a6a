"""`/api/v1/saved-images/`: the organization's saved images (保存镜像), the same use cases the
images page calls (`apps.agents.saved_images`): list, save a stopped host as one, delete.
Mounted by portal/urls.py beside the partner API (`saved_images_api_urls`), since the API app
sits below the agents app."""

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.response import Response

from apps.agents import saved_images, selectors
from apps.agents.models import SavedImage, SavedImageCopy
from apps.api.base import LoamAPIMixin
from apps.api.permissions import current_actor, current_organization
from apps.api.serializers.fields import IntegerField
from apps.tenants.roles import Action


class SavedImageCopySerializer(serializers.ModelSerializer):
    server = serializers.CharField(source="server.node.hostname", read_only=True)
    progress_pct = serializers.IntegerField(
        read_only=True, help_text="How far it is: 100 once the server holds it."
    )

    class Meta:
        model = SavedImageCopy
        fields = ["server", "state", "progress_pct", "message"]
        read_only_fields = fields


class SavedImageSerializer(serializers.ModelSerializer):
    code = serializers.CharField(
        source="image.code", read_only=True, help_text="The image's code, to order hosts from it."
    )
    name = serializers.CharField(source="image.name", read_only=True)
    description = serializers.CharField(source="image.description", read_only=True)
    server = serializers.CharField(
        source="server.node.hostname",
        read_only=True,
        help_text=(
            "The server that saved it. Hosts from it run on any server of its region: it is "
            "copied to one when a host needs it there (`copies`)."
        ),
    )
    copies = SavedImageCopySerializer(
        many=True, read_only=True, help_text="Its copies to other servers of its region."
    )
    region = serializers.CharField(source="server.node.pool.region.code", read_only=True)
    instance = serializers.IntegerField(
        source="instance_id",
        read_only=True,
        allow_null=True,
        help_text="The host it was saved from.",
    )
    hosts = serializers.IntegerField(
        source="users", read_only=True, help_text="Hosts not released that run from it."
    )

    class Meta:
        model = SavedImage
        fields = [
            "id",
            "code",
            "name",
            "description",
            "state",
            "message",
            "size_bytes",
            "digest",
            "server",
            "region",
            "instance",
            "hosts",
            "copies",
            "created_at",
        ]
        read_only_fields = fields


class SaveImageInputSerializer(serializers.Serializer):
    instance = IntegerField(min_value=1, help_text="A stopped host of yours (its id).")
    name = serializers.CharField(max_length=saved_images.NAME_MAX)
    description = serializers.CharField(max_length=2000, required=False, default="")


@extend_schema_view(
    list=extend_schema(description="The organization's saved images not deleted, newest first."),
    retrieve=extend_schema(description="One saved image; another organization's is a 404."),
    create=extend_schema(
        request=SaveImageInputSerializer,
        responses={201: SavedImageSerializer},
        description="Save a stopped host (on the host agent's servers) as an image: `saving` "
        "until its agent reports it `ready`. A host that is not stopped is a 409.",
    ),
    destroy=extend_schema(
        responses={204: None},
        description="Delete an image no host uses; one in use (or still saving) is a 409 that "
        "names the hosts.",
    ),
)
class SavedImageViewSet(
    LoamAPIMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    queryset = SavedImage.objects.none()  # for the schema; requests use get_queryset()
    serializer_class = SavedImageSerializer
    http_method_names = ["get", "post", "delete", "head", "options"]
    required_actions = {
        "list": Action.VIEW,
        "retrieve": Action.VIEW,
        "create": Action.ORDER,
        "destroy": Action.RELEASE,
    }
    filterset_fields = ["state"]
    ordering_fields = ["created_at"]

    def get_queryset(self):
        organization = current_organization(self.request)
        if organization is None:
            return SavedImage.objects.none()
        return selectors.saved_images_for(organization)

    def create(self, request):
        data = SaveImageInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        saved = saved_images.save_host_image(
            organization=current_organization(request),
            actor=current_actor(request),
            instance_id=data.validated_data["instance"],
            name=data.validated_data["name"],
            description=data.validated_data["description"],
        )
        saved = self.get_queryset().get(pk=saved.pk)
        return Response(self.get_serializer(saved).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, pk=None):
        saved_images.delete_saved_image(
            organization=current_organization(request),
            actor=current_actor(request),
            saved_image_id=self.get_object().pk,
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
