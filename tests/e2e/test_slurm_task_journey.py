"""A training task ordered in the browser runs as a real Slurm job (deploy/slurm/start.sh).

An operator's Slurm backend is registered in a small park; the tenant submits a task on the
task form in Chromium, and the task page shows it placed on a Slurm node, then the job id, the
GPU indices, the live state and the job's own output, and what it cost. Celery runs eagerly in
the live server; the test plays Celery beat (`schedule_queues`) while the page polls.
"""

import re
import time

import pytest
from playwright.sync_api import Page, expect

from apps.orchestration.models import Task, TaskState
from apps.orchestration.tasks import schedule_queues
from apps.tenants.models import VerificationState
from tests.factories import (
    MembershipFactory,
    OrganizationFactory,
    ParkFactory,
    ParkOperatorFactory,
    UserFactory,
)
from tests.slurm import slurm_park

pytestmark = pytest.mark.slurm
PASSWORD = "journey-password-1"
TIMEOUT_MS = 30_000


@pytest.mark.django_db(transaction=True)
def test_a_task_ordered_in_the_browser_runs_on_slurm(
    page: Page, live_server, screenshot, settings, slurm_cluster
):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    park = ParkFactory()
    organization = OrganizationFactory(park=park, verification_state=VerificationState.VERIFIED)
    owner = UserFactory(email="slurm-owner@example.com", username="slurm-owner@example.com")
    owner.set_password(PASSWORD)
    owner.save()
    MembershipFactory(organization=organization, user=owner, role="owner")
    operator = UserFactory()
    ParkOperatorFactory(park=park, user=operator)
    _backend, image = slurm_park(park, operator, slurm_cluster, card_hour_minor=1200)

    expect.set_options(timeout=TIMEOUT_MS)
    page.set_default_timeout(TIMEOUT_MS)
    page.context.add_cookies([{"name": "django_language", "value": "en", "url": live_server.url}])
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill('input[name="login"]', owner.email)
    page.fill('input[name="password"]', PASSWORD)
    page.locator('form:has(input[name="login"]) button[type="submit"]').click()
    page.wait_for_url(lambda url: "/accounts/login/" not in url)

    page.goto(f"{live_server.url}/tasks/new/")
    page.fill("#id_name", "resnet")
    page.select_option("#id_image", image.code)
    page.fill("#id_command", "echo GPUS=$CUDA_VISIBLE_DEVICES; sleep 3; echo done")
    page.fill("#id_accelerators", "2")
    page.fill("#id_vcpu", "2")
    page.fill("#id_ram_gb", "2")
    screenshot("slurm-task-form")
    page.click("#task-submit")
    page.wait_for_url(lambda url: "/tasks/new/" not in url)

    task = Task.objects.get(name="resnet")
    assert re.fullmatch(r"loam_o\d+/\d+", task.backend_handle)  # its account and job id
    expect(page.locator("#backend-job")).to_contain_text(task.backend_handle)

    end = time.monotonic() + 40
    while task.state != TaskState.SUCCEEDED and time.monotonic() < end:
        schedule_queues()  # what beat does every 30 s
        task.refresh_from_db()
        time.sleep(0.5)
    assert task.state == TaskState.SUCCEEDED
    page.reload()
    expect(page.locator("#task-logs")).to_contain_text("done")
    if slurm_cluster.images_dir:  # it ran in its image: the page names the build
        expect(page.locator("#task-image-ran")).to_contain_text(f"{image.code} sha256:")
    devices = ", ".join(map(str, task.backend_status["devices"]))
    expect(page.locator("#backend-devices")).to_have_text(devices)
    expect(page.locator("#task-logs")).to_contain_text("GPUS=" + devices.replace(", ", ","))
    expect(page.locator("#task-placement")).to_contain_text(task.node.hostname)
    screenshot("slurm-task-done")
