import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# Every job runs again, with backoff, when it loses a race for rows (a deadlock).
app = Celery("loam", task_cls="apps.core.contention:RetryOnContention")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
