"""Beat jobs of the host agents: silent servers marked down (every 10 s), old card samples
pruned and orphaned hosts removed (every 5 minutes)."""

from celery import shared_task

from apps.agents import services


@shared_task
def mark_silent_servers() -> int:
    return len(services.mark_silent_servers())


@shared_task
def tidy_agent_state() -> dict:
    return {
        "samples_pruned": services.prune_samples(),
        "hosts_removed": len(services.remove_orphaned_hosts()),
    }
