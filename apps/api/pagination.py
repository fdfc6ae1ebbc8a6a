from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """Pages of 50, up to 200 on request. A page number or size that is not a whole number from
    1 is a 400 naming it (DRF would answer the default size, or a 404), as the schema says; a
    page past the last is a 404. A size over 200 gives 200, as documented."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
    last_page_strings = ()  # `page=last` is no number the schema documents

    def get_page_size(self, request):
        if self.page_size_query_param not in request.query_params:
            return self.page_size
        return min(self._count(request, self.page_size_query_param), self.max_page_size)

    def get_page_number(self, request, paginator):
        if self.page_query_param not in request.query_params:
            return 1
        return self._count(request, self.page_query_param)

    @staticmethod
    def _count(request, name) -> int:
        value = request.query_params[name]
        # ASCII digits only: int() would also read "٣", " 3" or "+3".
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise ValidationError({name: [_("Give a whole number from 1.")]})
        return int(value)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"]["minimum"] = 1
            if parameter["name"] == self.page_size_query_param:
                parameter["description"] = (
                    f"Results per page: {self.page_size} unless given, at most {self.max_page_size}"
                    f" (more gives {self.max_page_size})."
                )
        return parameters
