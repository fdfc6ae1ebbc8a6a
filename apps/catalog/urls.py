from django.urls import path

from apps.catalog import views

app_name = "catalog"
urlpatterns = [
    path("", views.flavor_list, name="flavor_list"),
    path("flavors/<str:code>/", views.flavor_detail, name="flavor_detail"),
]
