"""An operator's console has one navigation (issue 35): the top bar leads into the back office
once, and the back office's own navigation lists its pages, each once."""

import re

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def navigation(html: str) -> str:
    """The page's navigations (the top bar, the back office's), without its content."""
    return "".join(re.findall(r"<nav\b.*?</nav>", html, re.S))


@pytest.mark.parametrize(
    "page",
    [
        "operations:verification_queue",
        "operations:order_approvals",
        "billing:ops_overview",
        "operations:audit_log",
    ],
)
def test_each_back_office_page_is_linked_once(client, operator, page):
    client.force_login(operator)
    html = navigation(client.get(reverse("operations:overview")).content.decode())
    assert html.count(f'href="{reverse(page)}"') == 1


def test_the_top_bar_leads_into_the_back_office(client, operator):
    client.force_login(operator)
    html = client.get(reverse("billing:ops_overview")).content.decode()
    assert 'id="nav-operations"' in html and f'href="{reverse("operations:overview")}"' in html
    assert 'id="ops-menu"' not in html  # no second list of the same pages


def test_a_staff_operator_finds_the_admin_site_in_the_back_office(client, operator):
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    client.force_login(operator)
    html = navigation(client.get(reverse("operations:overview")).content.decode())
    assert html.count(f'href="{reverse("admin:index")}"') == 1
