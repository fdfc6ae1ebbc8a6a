import os

import pytest
from django.db import connection

from tests.agent_wheels import wheelhouse  # noqa: F401 (a fixture: the agent's wheels, offline)

# The suite runs the demo park (its simulator: settings.LOAM_DEMO is on under pytest); the
# processes it starts (a real worker, a live portal for the agent) read it from the environment.
os.environ.setdefault("LOAM_DEMO", "true")


def pytest_collection_modifyitems(config, items):
    """Tests marked `postgres` need real row locks and concurrent connections."""
    if connection.vendor == "postgresql":
        return
    skip = pytest.mark.skip(
        reason="needs PostgreSQL (row locks, real concurrency); set DATABASE_URL to run it"
    )
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _plain_static_storage(settings):
    """Tests render templates without a collectstatic manifest."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.fixture(autouse=True)
def _no_shared_file_storage(settings):
    """No storage server for shared file storage unless a test asks for this machine's
    (tests/sharedfs/conftest.py `storage_server`): a host ordered on an agent server would make
    a database there for its organization's file system."""
    settings.LOAM_SHARED_FS_SERVER = ""


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test starts with an empty cache: what one test cached (the visitors' free room, the
    overview's charts, login counts) never answers in the next."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True, scope="session")
def _host_ca_key(tmp_path_factory):
    """The web terminal's CA key (made on first use) lives in the run's temporary folder, not
    in the checkout's var/."""
    from django.conf import settings

    settings.LOAM_HOST_CA_KEY = tmp_path_factory.mktemp("host-ca") / "ssh_user_ca"


@pytest.fixture(autouse=True, scope="session")
def _image_archive_dir(tmp_path_factory):
    """Saved images' archives on their way to another server: in the run's temporary folder."""
    from django.conf import settings

    settings.LOAM_IMAGE_ARCHIVE_DIR = tmp_path_factory.mktemp("image-archives")


@pytest.fixture(autouse=True)
def _celery_eager(monkeypatch):
    """Tasks run in-process unless a test starts a real worker (tests/e2e)."""
    from portal.celery import app

    monkeypatch.setitem(app.conf, "task_always_eager", True)
    monkeypatch.setitem(app.conf, "task_eager_propagates", True)


# --- Role fixtures: one park, an organization with a user in each role, an operator of the park,
# and another organization (in the same park) with its own owner, for isolation tests.


@pytest.fixture
def park(db):
    from tests.factories import ParkFactory

    return ParkFactory()


@pytest.fixture
def organization(park):
    from tests.factories import OrganizationFactory

    return OrganizationFactory(park=park)


@pytest.fixture
def member_of():
    """member_of(organization, role) -> a new user with that role there."""
    from tests.factories import MembershipFactory, UserFactory

    def make(organization, role):
        user = UserFactory()
        MembershipFactory(organization=organization, user=user, role=role)
        return user

    return make


@pytest.fixture
def owner(organization, member_of):
    return member_of(organization, "owner")


@pytest.fixture
def admin(organization, member_of):
    return member_of(organization, "admin")


@pytest.fixture
def member(organization, member_of):
    return member_of(organization, "member")


@pytest.fixture
def billing(organization, member_of):
    return member_of(organization, "billing")


@pytest.fixture
def viewer(organization, member_of):
    return member_of(organization, "viewer")


@pytest.fixture
def operator(park):
    from tests.factories import ParkOperatorFactory, UserFactory

    user = UserFactory()
    ParkOperatorFactory(park=park, user=user)
    return user


@pytest.fixture
def other_organization(park):
    from tests.factories import OrganizationFactory

    return OrganizationFactory(park=park)


@pytest.fixture
def other_owner(other_organization, member_of):
    return member_of(other_organization, "owner")


LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "testserver"}


@pytest.fixture(autouse=True)
def _no_traffic_off_this_machine(monkeypatch):
    """Tests talk to 127.0.0.1 only (webhook receivers, the broker, PostgreSQL): a name or an
    address elsewhere fails at once, before any DNS query or packet leaves."""
    import ipaddress
    import socket

    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

    def local(host) -> bool:
        if host is None or str(host) in LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
        except ValueError:
            return False

    def getaddrinfo(host, *args, **kwargs):
        if not local(host):
            raise OSError(f"tests may not resolve {host!r}: only loopback is reachable")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not local(address[0]):
            raise OSError(f"tests may not connect to {address!r}: only loopback is reachable")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture(scope="session")
def outside_world(tmp_path_factory):
    """The internet as a tenant sees it (tests/outside_world.py): built once per run, where
    root and the tools are at hand; under LOAM_REQUIRE_SERVICES=1 its absence is a failure."""
    import os

    from tests.outside_world import OutsideWorld, missing_tools

    if reason := missing_tools():
        if os.environ.get("LOAM_REQUIRE_SERVICES") == "1":
            pytest.fail(f"LOAM_REQUIRE_SERVICES=1 but {reason}")
        pytest.skip(reason)
    world = OutsideWorld(tmp_path_factory.mktemp("outside")).start()
    yield world
    world.stop()


@pytest.fixture(autouse=True)
def _lock_order(request):
    """On PostgreSQL, every row lock a test's use cases take follows the declared lock order
    (apps.core.transactions.LOCK_ORDER; tests/lock_order.py). LOAM_LOCK_PAIRS=<file> appends
    each pair of models locked one after the other, and where, to that file: the data to place
    a new model in the order."""
    if connection.vendor != "postgresql" or request.node.get_closest_marker("breaks_lock_order"):
        yield
        return
    from tests.lock_order import describe, recording

    with recording() as recorder:
        yield
    if os.environ.get("LOAM_LOCK_PAIRS"):
        with open(os.environ["LOAM_LOCK_PAIRS"], "a") as out:
            out.writelines("\t".join(pair) + "\n" for pair in sorted(recorder.pairs))
    assert not recorder.out_of_order, describe(recorder.out_of_order)
