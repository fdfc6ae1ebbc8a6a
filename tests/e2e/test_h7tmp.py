import io, re
import pytest
from django.core.management import call_command
from tests.e2e.test_tenant_journey import SSH_KEY
from apps.core import demo

@pytest.mark.django_db(transaction=True)
def test_tmp(page, live_server, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("seed_demo", stdout=io.StringIO())
    from apps.orchestration.models import Backend
    Backend.objects.update(config={})
    resp = []
    page.on("request", lambda r: resp.append((r.method, r.url, r.resource_type, r.headers.get("hx-request"))))
    page.on("console", lambda m: print("console:", m.text))
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill('input[name="login"]', demo.OWNER["email"])
    page.fill('input[name="password"]', demo.OWNER["password"])
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)
    page.goto(f"{live_server.url}/instances/new/?flavor=h200.8x")
    page.evaluate("window.__same = 1")
    page.fill("#id_ssh_public_key", SSH_KEY)
    page.fill("#id_count", "3")
    page.locator("#id_count").dispatch_event("change")
    page.wait_for_timeout(1500)
    page.locator("#order-submit").click()
    page.wait_for_timeout(2000)
    print([r for r in resp if "/instances/" in r[1]])
    print("same doc:", page.evaluate("window.__same"), "nav:", page.locator("nav.navbar").count(), "wrapper:", page.locator("#order-form-wrapper").count())
