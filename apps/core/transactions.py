"""One after-commit helper: side effects run only once the transaction that caused them commits."""

from django.db import transaction


def on_commit_task(task, *args, **kwargs):
    """Schedule `task.delay(*args)` after commit. Pass primary keys, never model objects: the task
    reloads the row and re-checks its state, because it may run late or twice."""
    transaction.on_commit(lambda: task.delay(*args, **kwargs))
