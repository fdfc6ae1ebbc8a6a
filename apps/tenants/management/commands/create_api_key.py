from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.tenants.models import ApiKeyScope, Membership
from apps.tenants.services import create_api_key


class Command(BaseCommand):
    help = "Create an API key for a user's organization and print its secret (shown once)."

    def add_arguments(self, parser):
        parser.add_argument("--email", required=True, help="a member allowed to manage keys")
        parser.add_argument("--organization", help="the organization's slug (default: the first)")
        parser.add_argument("--scope", choices=ApiKeyScope.values, default=ApiKeyScope.READ)
        parser.add_argument("--name", default="cli")

    def handle(self, *args, email, organization, scope, name, **options):
        user = get_user_model().objects.filter(email__iexact=email).first()
        if user is None:
            raise CommandError(f"No user with the email {email}.")
        memberships = Membership.objects.filter(user=user).select_related("organization")
        if organization:
            memberships = memberships.filter(organization__slug=organization)
        membership = memberships.order_by("organization__name").first()
        if membership is None:
            raise CommandError(f"{email} is not a member of that organization.")
        _key, secret = create_api_key(
            organization=membership.organization, actor=user, name=name, scope=scope
        )
        self.stdout.write(secret)
