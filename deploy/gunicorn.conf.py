"""Gunicorn's configuration for the portal behind nginx: `gunicorn -c deploy/gunicorn.conf.py`.

The systemd unit, the compose file, the Kubernetes manifests and deploy/stack/start.sh all run
this file; what differs between them comes from the environment:

GUNICORN_BIND            where to listen (127.0.0.1:8000; unix:/run/loam/gunicorn.sock)
GUNICORN_WORKERS         worker processes (2 × the CPUs this process may use + 1, at most 12)
GUNICORN_TIMEOUT         seconds a request may take before its worker is replaced (60)
FORWARDED_ALLOW_IPS      the proxies trusted for X-Forwarded-Proto (127.0.0.1,::1; gunicorn
                         reads it itself; connections on a unix socket are always trusted)
GUNICORN_CONTROL_SOCKET  gunicornc's control socket; off unless set
PROMETHEUS_MULTIPROC_DIR where the workers keep their request metrics (portal/metrics.py); set
                         it for gunicorn only, not for the Celery processes
"""

import gc
import os

wsgi_app = "portal.wsgi:application"

bind = [os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")]

# Sync workers, each serving one request at a time: the usual 2 × CPUs + 1. Capped, because a
# container sees every CPU of its host and each worker holds a Django process (~100 MB).
_cpus = len(os.sched_getaffinity(0))
workers = int(os.environ.get("GUNICORN_WORKERS", min(2 * _cpus + 1, 12)))

# Requests are short (provisioning runs in Celery); one still running after this is stuck.
# nginx's proxy_read_timeout is longer, so gunicorn's limit is the one that applies.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 60))
# On SIGTERM (systemd stop, a rolling deploy) requests in flight get this long to finish.
graceful_timeout = 30
# nginx talks HTTP/1.0 to its upstream and closes each connection; a longer wait helps nothing.
keepalive = 5

# Recycle each worker after about a thousand requests, staggered so that they do not all restart
# at once: it bounds any slow memory growth.
max_requests = 1000
max_requests_jitter = 100

# The heartbeat file lives in memory: on a disk-backed /tmp (a container's overlay) its fchmod
# can stall a worker long enough to be killed as silent.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None

# The default control socket ($HOME/.gunicorn/gunicorn.ctl) would be shared by every gunicorn
# this user runs on the machine.
control_socket = os.environ.get("GUNICORN_CONTROL_SOCKET", "")
control_socket_disable = not control_socket

# One access line per request on stdout (the journal, the container log), with the client
# address nginx saw and the request time in seconds.
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
access_log_format = '%({x-real-ip}i)s "%(r)s" %(s)s %(b)s %(L)ss "%(f)s" "%(a)s" %(p)s'
proc_name = "loam-web"


# Python's cyclic garbage collector, tuned for a worker. Once the application is loaded its
# objects (Django's models, URLs, translations: over 150,000) live as long as the worker, so
# they are frozen out of the collector's sight; and the youngest generation is collected after
# 7,000 net allocations instead of 700, since an API request makes and drops thousands of ORM
# objects. Together: 0.5 ms of collection an order, where it was 1.8–1.9 ms
# (`bench/order_profile.py --orders 100`, against `--default-gc`).
GC_YOUNG_THRESHOLD = 7000


def post_worker_init(worker):
    gc.freeze()
    _young, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


# Prometheus's multiprocess mode (portal/metrics.py): each worker keeps its request counters in
# files under PROMETHEUS_MULTIPROC_DIR and a scrape, answered by any worker, adds them up. The
# hooks empty the directory as the master starts and give each worker a slot, so a replaced
# worker's files are carried on rather than left behind (portal/metrics_workers.py says why).
from portal.metrics_workers import on_starting, post_fork, pre_fork  # noqa: E402, F401
