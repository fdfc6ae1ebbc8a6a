from django.urls import path, register_converter

from apps.catalog import views


class FlavorCodeConverter:
    """A flavor code in a path: any segment without a NUL (PostgreSQL holds no NUL in text, so
    /catalog/flavors/%00/ could only fail in the database; it is a 404 here instead)."""

    regex = "[^/\x00]+"

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


register_converter(FlavorCodeConverter, "flavor_code")

app_name = "catalog"
urlpatterns = [
    path("", views.flavor_list, name="flavor_list"),
    path("flavors/<flavor_code:code>/", views.flavor_detail, name="flavor_detail"),
]
