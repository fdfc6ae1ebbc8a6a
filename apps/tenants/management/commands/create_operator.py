"""The first operator of a production park (README, "Production"): after `migrate`, instead of
`seed_demo`, which is for demos only. It creates the park when it does not exist and never
anything else: no demo logins, organizations or catalog."""

import getpass
import os
import sys
from pathlib import Path

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.core.validators import validate_email, validate_slug
from django.db.models import Q
from django.urls import reverse
from django.utils.translation import gettext as _

from apps.core.money import Currency
from apps.tenants.models import Park
from apps.tenants.services import add_park_operator

# For automation that holds the password in the environment (a Kubernetes Secret, CI).
PASSWORD_VARIABLE = "LOAM_OPERATOR_PASSWORD"


class Command(BaseCommand):
    help = (
        "Create a park's operator with a password they choose (prompted twice, or from "
        f"--password-file or ${PASSWORD_VARIABLE}), and the park itself if it does not exist."
    )
    # Tests hand the prompt a terminal of their own, as Django's createsuperuser allows.
    stealth_options = ("stdin",)

    def add_arguments(self, parser):
        parser.add_argument("--email", required=True, help="the operator signs in with it")
        parser.add_argument(
            "--park", dest="slug", required=True, help="the park's slug, e.g. yangtze-delta"
        )
        parser.add_argument("--park-name", help="the park's name, needed when the park is new")
        parser.add_argument(
            "--currency",
            choices=Currency.values,
            help=f"a new park's currency (default {Currency.CNY})",
        )
        parser.add_argument(
            "--password-file", type=Path, help="read the password from this file's first line"
        )

    def handle(self, *args, email, slug, park_name, currency, password_file, **options):
        email = email.strip().lower()
        try:
            validate_email(email)
            validate_slug(slug)
        except ValidationError as error:
            raise CommandError(" ".join(error.messages)) from error
        if _user_exists(email):
            raise CommandError(
                _("A user with the email %(email)s already exists; no operator was created.")
                % {"email": email}
            )
        existing = Park.objects.filter(slug=slug).first()
        if existing is None and not park_name:
            raise CommandError(
                _("There is no park %(slug)s yet: give its name with --park-name.") % {"slug": slug}
            )
        if existing is not None:
            _check_unchanged(existing, name=park_name, currency=currency)

        password = self._password(password_file, options.get("stdin", sys.stdin))
        try:
            password_validation.validate_password(
                password, get_user_model()(username=email, email=email)
            )
        except ValidationError as error:
            raise CommandError(
                _("This password is refused: %(reasons)s") % {"reasons": " ".join(error.messages)}
            ) from error

        operator, created = add_park_operator(
            email=email,
            password=password,
            park_slug=slug,
            park_name=park_name,
            currency=currency or Currency.CNY,
        )
        park = operator.park
        if created:
            self.stdout.write(
                _("Created the park %(name)s (%(slug)s, %(currency)s).")
                % {"name": park.name, "slug": park.slug, "currency": park.currency}
            )
        self.stdout.write(
            self.style.SUCCESS(
                _("%(email)s operates %(park)s and can sign in at %(url)s.")
                % {
                    "email": email,
                    "park": park.name,
                    "url": settings.LOAM_BASE_URL + reverse("account_login"),
                }
            )
        )

    def _password(self, password_file: Path | None, stdin) -> str:
        if password_file is not None:
            try:
                lines = password_file.read_text().splitlines()
            except OSError as error:
                raise CommandError(
                    _("Cannot read the password file: %(error)s") % {"error": error}
                ) from error
            return lines[0] if lines else ""
        if PASSWORD_VARIABLE in os.environ:
            return os.environ[PASSWORD_VARIABLE]
        if not stdin.isatty():
            raise CommandError(
                _(
                    "No password given: run this in a terminal to type it, or use "
                    "--password-file or %(variable)s."
                )
                % {"variable": PASSWORD_VARIABLE}
            )
        password = getpass.getpass(_("Password: "))
        if getpass.getpass(_("Password (again): ")) != password:
            raise CommandError(_("The two passwords differ; no operator was created."))
        return password


def _user_exists(email: str) -> bool:
    user_model = get_user_model()
    return (
        user_model.objects.filter(Q(email__iexact=email) | Q(username__iexact=email)).exists()
        or EmailAddress.objects.filter(email__iexact=email).exists()
    )


def _check_unchanged(park: Park, *, name: str | None, currency: str | None) -> None:
    """An existing park is used as it is: options that contradict it are refused, not applied."""
    if name and name != park.name:
        raise CommandError(
            _("The park %(slug)s is named %(name)s; this command does not rename parks.")
            % {"slug": park.slug, "name": park.name}
        )
    if currency and currency != park.currency:
        raise CommandError(
            _(
                "The park %(slug)s uses %(currency)s; this command does not change a park's "
                "currency."
            )
            % {"slug": park.slug, "currency": park.currency}
        )
