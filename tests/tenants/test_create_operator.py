"""`manage.py create_operator`: production's first operator, with a password they choose, and
their park when it is new; never a demo login or any other data."""

import io

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.utils import translation

from apps.core.models import AuditEvent
from apps.operations import demo
from apps.tenants.management.commands.create_operator import PASSWORD_VARIABLE
from apps.tenants.models import Organization, Park, ParkOperator
from apps.tenants.selectors import is_operator_of
from tests.factories import ParkFactory, UserFactory

pytestmark = pytest.mark.django_db

EMAIL = "ops@park.example"
PASSWORD = "granite lantern orchard 73"


@pytest.fixture(autouse=True)
def _english():
    with translation.override("en"):
        yield


@pytest.fixture
def password_file(tmp_path):
    def write(password: str):
        path = tmp_path / "password"
        path.write_text(password + "\n")
        return path

    return write


def create_operator(*args: str, **options) -> str:
    out = io.StringIO()
    call_command("create_operator", *args, stdout=out, **options)
    return out.getvalue()


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_new_park_and_its_operator_who_signs_in_and_operates_it(client, settings, password_file):
    settings.ACCOUNT_EMAIL_VERIFICATION = "mandatory"  # as in production
    cache.clear()  # failed-login counters
    output = create_operator(
        f"--email={EMAIL}",
        "--park=yangtze-delta",
        "--park-name=长三角公共算力园区",
        "--currency=USD",
        f"--password-file={password_file(PASSWORD)}",
    )

    park = Park.objects.get()
    assert (park.slug, park.name, park.currency) == ("yangtze-delta", "长三角公共算力园区", "USD")
    user = get_user_model().objects.get(email=EMAIL)
    assert is_operator_of(user, park)
    assert not (user.is_staff or user.is_superuser)  # a park's operator, not the platform's admin
    assert EMAIL in output and "/accounts/login/" in output
    [event] = AuditEvent.objects.filter(action="park.operator_added")
    assert event.park_id == park.pk

    response = client.post("/accounts/login/", {"login": EMAIL, "password": PASSWORD})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(user.pk)
    assert client.get("/ops/").status_code == 200


def test_an_existing_park_gets_the_operator_and_stays_as_it_was(password_file):
    park = ParkFactory(slug="west", name="West", currency="CNY")

    create_operator(f"--email={EMAIL}", "--park=west", f"--password-file={password_file(PASSWORD)}")

    assert list(Park.objects.all()) == [park]
    assert ParkOperator.objects.get().park == park


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--park-name=Renamed"], "does not rename parks"),
        (["--currency=USD"], "does not change a park's currency"),
    ],
)
def test_an_option_that_contradicts_the_existing_park_is_refused(options, message, password_file):
    ParkFactory(slug="west", name="West", currency="CNY")

    with pytest.raises(CommandError, match=message):
        create_operator(
            f"--email={EMAIL}",
            "--park=west",
            *options,
            f"--password-file={password_file(PASSWORD)}",
        )

    assert not get_user_model().objects.exists()
    assert Park.objects.get().name == "West"


def test_a_new_park_needs_a_name(password_file):
    with pytest.raises(CommandError, match="--park-name"):
        create_operator(
            f"--email={EMAIL}", "--park=new", f"--password-file={password_file(PASSWORD)}"
        )

    assert not Park.objects.exists()


@pytest.mark.parametrize(
    ("password", "reason"),
    [
        ("short1", "too short"),
        ("password123", "too common"),
        ("83920571046", "entirely numeric"),
        ("ops@park.example", "too similar"),
        ("", "too short"),
    ],
)
def test_a_weak_password_is_refused_and_nothing_is_created(password, reason, password_file):
    with pytest.raises(CommandError, match=f"This password is refused: .*{reason}"):
        create_operator(
            f"--email={EMAIL}",
            "--park=new",
            "--park-name=New",
            f"--password-file={password_file(password)}",
        )

    assert not get_user_model().objects.exists()
    assert not Park.objects.exists()


@pytest.mark.parametrize("taken", [EMAIL, "OPS@park.example"])
def test_an_existing_user_is_refused(taken, password_file):
    UserFactory(email=taken)

    with pytest.raises(CommandError, match="already exists"):
        create_operator(
            f"--email={EMAIL}",
            "--park=new",
            "--park-name=New",
            f"--password-file={password_file(PASSWORD)}",
        )

    assert get_user_model().objects.count() == 1
    assert not ParkOperator.objects.exists()


def test_an_address_another_user_added_is_refused(password_file):
    EmailAddress.objects.create(user=UserFactory(), email=EMAIL, verified=False)

    with pytest.raises(CommandError, match="already exists"):
        create_operator(
            f"--email={EMAIL}",
            "--park=new",
            "--park-name=New",
            f"--password-file={password_file(PASSWORD)}",
        )


def test_running_it_again_refuses_rather_than_resetting_the_password(password_file):
    args = [f"--email={EMAIL}", "--park=new", "--park-name=New"]
    create_operator(*args, f"--password-file={password_file(PASSWORD)}")

    with pytest.raises(CommandError, match="already exists"):
        create_operator(*args, f"--password-file={password_file('another strong phrase 19')}")

    assert get_user_model().objects.get().check_password(PASSWORD)


def test_no_demo_login_organization_or_data_is_created(password_file):
    create_operator(
        f"--email={EMAIL}",
        "--park=new",
        "--park-name=New",
        f"--password-file={password_file(PASSWORD)}",
    )

    assert list(get_user_model().objects.values_list("email", flat=True)) == [EMAIL]
    demo_emails = [demo.OPERATOR["email"], demo.OWNER["email"], demo.PLATFORM_ADMIN["email"]]
    assert not get_user_model().objects.filter(email__in=demo_emails).exists()
    assert not Organization.objects.exists()
    assert list(Park.objects.values_list("slug", flat=True)) == ["new"]


def test_the_password_can_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(PASSWORD_VARIABLE, PASSWORD)

    create_operator(f"--email={EMAIL}", "--park=new", "--park-name=New", stdin=io.StringIO())

    assert get_user_model().objects.get().check_password(PASSWORD)


def test_the_password_is_typed_twice_at_a_prompt(monkeypatch):
    monkeypatch.delenv(PASSWORD_VARIABLE, raising=False)
    prompts = []
    monkeypatch.setattr("getpass.getpass", lambda prompt: prompts.append(prompt) or PASSWORD)

    create_operator(f"--email={EMAIL}", "--park=new", "--park-name=New", stdin=Terminal())

    assert prompts == ["Password: ", "Password (again): "]
    assert get_user_model().objects.get().check_password(PASSWORD)


def test_two_different_passwords_at_the_prompt_are_refused(monkeypatch):
    monkeypatch.delenv(PASSWORD_VARIABLE, raising=False)
    typed = iter([PASSWORD, PASSWORD + "!"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(typed))

    with pytest.raises(CommandError, match="differ"):
        create_operator(f"--email={EMAIL}", "--park=new", "--park-name=New", stdin=Terminal())

    assert not get_user_model().objects.exists()


def test_without_a_terminal_or_a_password_source_it_refuses_instead_of_defaulting(monkeypatch):
    monkeypatch.delenv(PASSWORD_VARIABLE, raising=False)

    with pytest.raises(CommandError, match="No password given"):
        create_operator(f"--email={EMAIL}", "--park=new", "--park-name=New", stdin=io.StringIO())

    assert not get_user_model().objects.exists()
