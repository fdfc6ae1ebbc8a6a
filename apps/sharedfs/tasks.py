import logging

import psycopg
from celery import shared_task

from apps.sharedfs.models import SharedFileSystem
from apps.sharedfs.services import read_usage

logger = logging.getLogger(__name__)


@shared_task
def read_shared_fs_usage() -> None:
    """Every file system's usage and meter; one unreachable is tried again next time."""
    for file_system_id in SharedFileSystem.objects.values_list("pk", flat=True):
        try:
            read_usage(file_system_id)
        except psycopg.Error:
            logger.warning("shared file system %s: usage unreadable", file_system_id, exc_info=True)
