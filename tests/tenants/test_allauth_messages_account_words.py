"""The account pages speak one Chinese: 邮箱 for email and 账号 for account (issue 35).

allauth's own zh-hans catalogue says 帐号, 帐户 and 电子邮件 and leaves "Email" in English in
places; the portal's catalogue (LOCALE_PATHS, read first) translates those messages again."""

import re

import pytest
from allauth.account.models import EmailAddress
from django.urls import reverse

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

CHINESE = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}


def visible_text(html: str) -> str:
    """The page's words, without its tags, scripts and styles (where "email" is a name)."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    html = re.sub(r"<input[^>]*type=\"hidden\"[^>]*>", " ", html)
    words = re.sub(
        r"<[^>]*?(?:placeholder|aria-label|title|value)=\"([^\"]*)\"[^>]*>", r" \1 ", html
    )
    return re.sub(r"<[^>]+>", " ", words)


OTHER_WORDS = ("帐号", "帐户", "账户", "电子邮件", "Email", "E-mail", "email")


def assert_one_chinese(text: str, where) -> None:
    assert "邮箱" in text, where
    for word in OTHER_WORDS:
        assert word not in text, (where, word)


@pytest.fixture
def signed_in(client):
    user = UserFactory(email="ada@example.com")
    EmailAddress.objects.update_or_create(
        user=user, email=user.email, defaults={"verified": True, "primary": True}
    )
    client.force_login(user)
    return user


@pytest.mark.parametrize("page", ["account_login", "account_signup", "account_reset_password"])
def test_entrance_pages_say_youxiang_and_zhanghao(client, page):
    assert_one_chinese(visible_text(client.get(reverse(page), **CHINESE).content.decode()), page)


def test_a_failed_login_says_youxiang(client):
    UserFactory(email="ada@example.com")
    wrong = client.post(
        reverse("account_login"), {"login": "ada@example.com", "password": "wrong"}, **CHINESE
    )
    assert "邮箱或密码不正确" in visible_text(wrong.content.decode())
    assert_one_chinese(visible_text(wrong.content.decode()).replace("ada@example.com", ""), "login")


def test_the_account_email_page_says_youxiang_and_zhanghao(client, signed_in):
    text = visible_text(client.get(reverse("account_email"), **CHINESE).content.decode())
    assert "ada@example.com" in text
    assert_one_chinese(text.replace("ada@example.com", ""), "account_email")
