import logging

import psycopg
from celery import shared_task

from apps.sharedfs.models import SharedFileSystem, SharedFileSystemState
from apps.sharedfs.services import StorageUnavailable, finish_deleting, read_usage

logger = logging.getLogger(__name__)


@shared_task
def read_shared_fs_usage() -> None:
    """Every file system's usage and meter; one unreachable is tried again next time, and so is
    the deletion of one its deletion's job could not finish."""
    for file_system_id, state in SharedFileSystem.objects.values_list("pk", "state"):
        try:
            if state == SharedFileSystemState.DELETING:
                finish_deleting(file_system_id)
            else:
                read_usage(file_system_id)
        except (psycopg.Error, StorageUnavailable):
            logger.warning("shared file system %s: storage unreachable", file_system_id)


@shared_task
def drop_file_system(file_system_id: int) -> None:
    """A deleted file system's database and role, then its row; should the storage server be
    unreachable now, the usage pass finishes it (`read_shared_fs_usage`)."""
    try:
        finish_deleting(file_system_id)
    except StorageUnavailable:
        logger.warning("shared file system %s: not dropped yet", file_system_id, exc_info=True)
