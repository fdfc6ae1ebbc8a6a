"""Broker queues of the tests that run a real worker: each test has its own, emptied first."""

from kombu import Exchange, Queue

from portal.celery import app


def empty_queue(name: str) -> None:
    """Declare the queue (a purge of an unknown one fails) and drop every message in it."""
    with app.connection_for_write() as connection:
        queue = Queue(name, Exchange(name), routing_key=name)(connection.default_channel)
        queue.declare()
        queue.purge()
