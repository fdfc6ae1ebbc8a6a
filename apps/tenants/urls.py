from django.urls import path

from apps.tenants import views

app_name = "tenants"
urlpatterns = [
    path("org/", views.organization_detail, name="organization"),
    path("org/new/", views.organization_create, name="organization_create"),
    path("org/switch/", views.organization_switch, name="organization_switch"),
    path("org/verification/", views.verification, name="verification"),
    path("org/verification/licence/", views.licence, name="licence"),
    path("org/members/", views.members, name="members"),
    path("org/members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("org/members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path(
        "org/invitations/<int:invitation_id>/resend/",
        views.invitation_resend,
        name="invitation_resend",
    ),
    path(
        "org/invitations/<int:invitation_id>/revoke/",
        views.invitation_revoke,
        name="invitation_revoke",
    ),
    path("org/api-keys/", views.api_keys, name="api_keys"),
    path("org/api-keys/<int:key_id>/revoke/", views.api_key_revoke, name="api_key_revoke"),
    path("invitations/<str:token>/", views.invitation, name="invitation"),
]
