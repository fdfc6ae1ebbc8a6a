import pytest
from django.test import RequestFactory

from apps.core.web import client_ip


@pytest.fixture
def behind_proxy(settings):
    settings.ALLAUTH_TRUSTED_CLIENT_IP_HEADER = "X-Real-IP"


def request(remote_addr="", **headers):
    return RequestFactory().get("/", REMOTE_ADDR=remote_addr, headers=headers)


def test_without_a_proxy_the_socket_address_counts(settings):
    settings.ALLAUTH_TRUSTED_CLIENT_IP_HEADER = None
    assert client_ip(request("198.51.100.7", **{"X-Real-IP": "203.0.113.9"})) == "198.51.100.7"


def test_behind_a_proxy_its_header_counts(behind_proxy):
    # nginx on a unix socket leaves REMOTE_ADDR empty.
    assert client_ip(request("", **{"X-Real-IP": "203.0.113.9"})) == "203.0.113.9"
    assert client_ip(request("127.0.0.1", **{"X-Real-IP": "2001:db8::1"})) == "2001:db8::1"


def test_behind_a_proxy_without_its_header_the_socket_address_counts(behind_proxy):
    assert client_ip(request("127.0.0.1")) == "127.0.0.1"


@pytest.mark.parametrize("value", ["not-an-ip", "999.1.1.1", "1.2.3.4\x00"])
def test_anything_but_an_address_is_unknown(behind_proxy, value):
    assert client_ip(request("", **{"X-Real-IP": value})) is None


def test_no_request_no_address():
    assert client_ip(None) is None
