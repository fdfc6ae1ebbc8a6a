"""The hosts thread of `loam-agent run`: poll the desired hosts, converge, report.

Changes are reported as they happen (from the host workers); the full list goes out at least
every `full_report_s`, so a report the portal missed heals by itself, each running host in it
with what it uses (`usage`: CPU, memory, data disk, network) for the portal's charts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from loam_agent.client import HostsNotSupported, PortalClient, PortalError, Rejected
from loam_agent.hosts.image_copies import ImageCopier
from loam_agent.hosts.model import DesiredHost, HostError, HostStatus
from loam_agent.hosts.reconcile import Reconciler, Runtime
from loam_agent.hosts.sequence import ReportSequence
from loam_agent.hosts.volumes import DesiredVolume

logger = logging.getLogger(__name__)


class HostsPoller:
    def __init__(
        self,
        client: PortalClient,
        runtime: Runtime,
        *,
        poll_interval_s: float,
        full_report_s: float,
        sequence: ReportSequence,
        stop: threading.Event,
        usage: Callable[[str], dict | None] | None = None,
        keep_saved_images: Callable[[set[str]], list[str]] | None = None,
        image_copier: ImageCopier | None = None,
    ) -> None:
        self._client = client
        self._image_copier = image_copier
        self._usage = usage
        self._keep_saved_images = keep_saved_images
        self._poll_interval_s = poll_interval_s
        self._full_report_s = full_report_s
        self._stop = stop
        self._runtime = runtime
        self.reconciler = Reconciler(runtime, self._report_change, next_sequence=sequence.next)
        # The server's volumes as last applied (None until the portal lists them).
        self.volume_reports: list[dict] | None = None
        self._desired_volumes: list[DesiredVolume] | None = None
        self.rejected: Rejected | None = None

    def run(self) -> None:
        etag: str | None = None
        last_full_report = time.monotonic()
        failing = False
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                etag, hosts, volumes = self._client.desired_hosts(etag)
                if volumes is not None:
                    # First: a host may start only with its volumes made.
                    self._apply_volumes(volumes)
                if hosts is not None:
                    self.reconciler.apply(self._parse(hosts))
                # Each poll: one kept for a host that was still here goes once the host has.
                self._remove_saved_images()
                if self._image_copier is not None:
                    # Saved images sent to or fetched from the portal, for another server.
                    self._image_copier.apply(self._client.image_transfers)
                if time.monotonic() - last_full_report >= self._full_report_s:
                    if self._desired_volumes is not None:
                        # Again: a volume unlisted while a host had it is deleted once the
                        # host is gone, one grown while mounted grows once it is not.
                        self.volume_reports = self._runtime.apply_volumes(self._desired_volumes)
                    self._client.report_hosts(*self._full_report())
                    last_full_report = time.monotonic()
                if failing:
                    logger.info("hosts poll works again")
                    failing = False
            except HostsNotSupported:
                logger.warning("the portal has no hosts API (an older portal); not polling hosts")
                return
            except Rejected as error:
                self.rejected = error  # the heartbeat loop exits 3 on it too
                return
            except PortalError as error:
                logger.warning("hosts poll failed: %s", error)
                failing = True
            self._stop.wait(max(0.0, self._poll_interval_s - (time.monotonic() - started)))

    def _apply_volumes(self, values: list[dict]) -> None:
        """The server's volumes made, grown, copied and deleted as listed; reported at once."""
        desired = []
        for value in values:
            try:
                desired.append(DesiredVolume.from_json(value))
            except (KeyError, TypeError, ValueError) as error:
                logger.error("the portal sent an unusable volume %r: %s", value, error)
        self._desired_volumes = desired
        self.volume_reports = self._runtime.apply_volumes(desired)
        for report in self.volume_reports:
            if report["state"] == "failed":
                logger.warning("volume %s: %s", report["id"], report["message"])
        sequence, _hosts = self.reconciler.full_report()
        self._client.report_hosts(sequence, [], self.volume_reports)

    def _full_report(self) -> tuple[int, list[dict], list[dict] | None]:
        """The full list, each running host with its `usage` (CPU, memory, disk, network),
        and the server's volumes as they were last applied."""
        sequence, hosts = self.reconciler.full_report()
        if self._usage is not None:
            for host in hosts:
                if host["state"] != "running":
                    continue
                try:
                    usage = self._usage(host["id"])
                except Exception:  # a figure the agent can't read mustn't stop the report
                    logger.debug("host %s: usage not read", host["id"], exc_info=True)
                    continue
                if usage is not None:
                    host["usage"] = usage
        return sequence, hosts, self.volume_reports

    def _remove_saved_images(self) -> None:
        kept = self._client.saved_images
        if self._keep_saved_images is None or kept is None:
            return
        for name in self._keep_saved_images(set(kept)):
            logger.info("saved image %s removed: the portal no longer keeps it", name)

    @staticmethod
    def _parse(hosts: list[dict]) -> list[DesiredHost]:
        parsed = []
        for value in hosts:
            try:
                parsed.append(DesiredHost.from_json(value))
            except HostError as error:
                logger.error("%s", error)
        return parsed

    def _report_change(self, sequence: int, status: HostStatus) -> None:
        level = logging.WARNING if status.state == "failed" else logging.INFO
        logger.log(level, "host %s: %s %s", status.id, status.state, status.message)
        try:
            self._client.report_hosts(sequence, [status.to_json()])
        except PortalError as error:
            # The next full report carries it.
            logger.warning("host report not delivered: %s", error)
