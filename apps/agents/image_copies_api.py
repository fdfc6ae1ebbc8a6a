"""The agent API's half of copying saved images between servers (`agents.image_copies`):
PUT and GET of an image's archive, and an agent's word on a transfer. Mounted with the agent
API at /api/v1/agent/saved-images/<code>/ (docs/agent-protocol.md, "Saved images")."""

from django.http import StreamingHttpResponse
from rest_framework import status
from rest_framework.response import Response

from apps.agents import image_copies
from apps.agents.api import AgentView, invalid
from apps.agents.serializers import ImageCopiedSerializer


class ArchiveView(AgentView):
    """PUT: the holder sends the image's archive (Content-Length, X-Loam-Sha256); GET: the
    server a copy waits on fetches it."""

    def put(self, request, code: str):
        try:
            length = int(request.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        image_copies.receive_archive(
            server=request.auth,
            code=code,
            body=request.stream,  # read as it comes: gigabytes are never held in memory
            length=length,
            sha256=request.headers.get("X-Loam-Sha256", ""),
        )
        return Response(status=status.HTTP_204_NO_CONTENT)

    def get(self, request, code: str):
        copy, path = image_copies.archive_to_fetch(server=request.auth, code=code)
        response = StreamingHttpResponse(
            image_copies.stream_archive(copy, path), content_type="application/x-tar"
        )
        response["Content-Length"] = str(path.stat().st_size)
        response["X-Loam-Sha256"] = copy.archive_sha256
        return response


class CopiedView(AgentView):
    """POST: the archive unpacked on this server, or a transfer given up (docs)."""

    def post(self, request, code: str):
        serializer = ImageCopiedSerializer(data=request.data)
        if not serializer.is_valid():
            return invalid(serializer.errors)
        image_copies.record_copied(server=request.auth, code=code, **serializer.validated_data)
        return Response(status=status.HTTP_204_NO_CONTENT)
