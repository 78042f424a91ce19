"""``--follow URL``: a thread that reads the simulated engine's device report every interval.

It runs on the exporter's own clock, beside the sampler and never on the scrape path: it fetches
``GET URL/sim/device`` from each followed service (a short timeout, a bounded answer), feeds the
reports to a :class:`~.follow.DeviceFollower`, publishes the states it settles on to the fake
NVML, and delivers each new XID as the fake's event. A service that does not answer is logged at
most once a minute; its GPU goes idle after a few intervals.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Final

from governor.contracts.simdevice import DEVICE_PATH, DeviceReport
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.follow import DeviceFollower

log = logging.getLogger("governor.exporters.gpu.poller")

MAX_REPORT_BYTES: Final = 64 * 1024  # a report is about 600 bytes
MAX_TIMEOUT_SECONDS: Final = 2.0
LOG_EVERY_SECONDS: Final = 60.0

Fetch = Callable[[str, float], bytes]


class ReportError(Exception):
    """A followed service gave no report: unreachable, an error status, or not a report."""


def fetch(url: str, timeout: float) -> bytes:
    """The body of ``GET url``, at most :data:`MAX_REPORT_BYTES` of it."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http(s) only)
            body: bytes = response.read(MAX_REPORT_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ReportError(str(reason)) from exc
    if len(body) > MAX_REPORT_BYTES:
        raise ReportError(f"the answer is over {MAX_REPORT_BYTES} bytes")
    return body


def parse_report(body: bytes) -> DeviceReport:
    try:
        return DeviceReport.from_dict(json.loads(body))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ReportError(f"not a device report: {str(exc)[:200]}") from exc


def device_url(base: str) -> str:
    return base.rstrip("/") + DEVICE_PATH


class DevicePoller:
    def __init__(
        self, urls: Sequence[str], nvml: FakeNvml, *, interval_seconds: float,
        fetch: Fetch = fetch, monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._urls = [device_url(url) for url in urls]
        self._nvml = nvml
        self._interval = interval_seconds
        self._timeout = min(interval_seconds, MAX_TIMEOUT_SECONDS)
        self._fetch = fetch
        self._monotonic = monotonic
        uuids = [nvml.uuid(index) for index in range(nvml.gpu_count)]
        self.follower = DeviceFollower(uuids, interval_seconds=interval_seconds)
        self._quiet_until: dict[str, float] = {}
        self._failing: set[str] = set()

    def run(self, stop: threading.Event) -> None:
        """Poll every interval until ``stop`` is set."""
        while not stop.is_set():
            started = self._monotonic()
            self.poll()
            stop.wait(max(0.0, self._interval - (self._monotonic() - started)))

    def poll(self) -> None:
        """One round: every followed service once, then the states published."""
        for url in self._urls:
            try:
                report = parse_report(self._fetch(url, self._timeout))
            except ReportError as exc:
                self._warn(url, f"no device report from {url}: {exc}; its GPU reads idle "
                                "until it answers")
                continue
            gpu = self.follower.gpu_of(report.gpu_uuid)
            if gpu is None:
                self._warn(url, f"{url} runs on GPU {report.gpu_uuid[:64]}, which is none of "
                                f"the {self._nvml.gpu_count} fake GPUs; nothing follows it")
                continue
            if url in self._failing:
                self._failing.discard(url)
                log.info("%s answers again", url)
            for event in self.follower.observe(report, self._monotonic()):
                self._nvml.inject_xid(event.gpu, event.xid)
        self._nvml.states = self.follower.settle(self._monotonic())

    def _warn(self, url: str, message: str) -> None:
        self._failing.add(url)
        now = self._monotonic()
        if now >= self._quiet_until.get(url, -1.0):
            log.warning("%s (said at most once a minute)", message)
            self._quiet_until[url] = now + LOG_EVERY_SECONDS
