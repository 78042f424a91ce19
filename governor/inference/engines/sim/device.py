"""The simulated GPU an engine runs on: every step charged to it, and the faults set on it.

Each step's :class:`~.roofline.StepParts` is charged as a real GPU would spend it: the kernels
keep the GPU busy (``busy``), the tensor pipes work for the GEMMs' and prefill attention's
FLOPs at the preset's efficiencies (``compute``), and DRAM streams the weights and the KV cache
at η·BW (``memory``); the host's overheads keep it idle. Counters are in wall seconds (simulated
seconds times the engine's time scale), cumulative since the engine started, so a reader
differences two reports for rates (``governor exporter --follow``).

A fault slows the steps the way the real one would:

* ``clock_ratio`` c: held-down clocks stretch every kernel by 1/c; the host's share is the CPU's
  and does not move;
* ``cotenant_sm_ratio`` s: another process takes that share of the SM time, so the engine's
  kernels take 1/(1 - s) as long in wall time (its own ``busy`` is still its kernels' time at
  the clock in force: the co-tenant's share is the co-tenant's);
* ``link_ratio`` r: each step's exchange with the host waits behind others' traffic on the
  link, as in a single-server queue: :data:`LINK_SERVICE_SECONDS` x r / (1 - r) more per step
  (``link``);
* ``xid``: the GPU raises it at once and then every ``XID_INTERVAL_SECONDS``; each adds
  ``ecc_uncorrected_per_xid`` uncorrected ECC errors and stalls the engine ``stall_seconds``
  (see :meth:`SimDevice.resume_at`).

A healthy device (``Faults()``) returns the roofline's step time untouched, so every benchmark
in virtual time gives the very same numbers with or without it::

    >>> from governor.inference.engines.sim.presets import get_preset
    >>> from governor.inference.engines.sim.roofline import Roofline, StepShape
    >>> preset = get_preset("llama-3-8b@h200")
    >>> roofline, shape = Roofline.of(preset), StepShape()
    >>> shape.add_decode(1000)
    >>> device = SimDevice(preset, "GPU-x")
    >>> healthy = roofline.step_seconds(shape)
    >>> device.step(roofline.parts(shape), healthy) == healthy
    True
    >>> _ = device.set_faults(Faults(clock_ratio=0.5, clock_reasons=("hw_thermal",)), now=0.0)
    >>> round(device.step(roofline.parts(shape), healthy) / healthy, 2)
    1.94
"""

from __future__ import annotations

import math
from typing import Final

from governor.contracts.simdevice import XID_INTERVAL_SECONDS, DeviceReport, Faults
from governor.inference.engines.sim.presets import ACTIVATION_RESERVE_BYTES, Preset
from governor.inference.engines.sim.roofline import StepParts

# The service time of one step's exchange with the host on a link others load. Not measured: a
# single GPU's steps move a few kB over PCIe, which no real link makes wait this long. It is
# chosen so that a drill's link_ratio 0.9 (9 x 14 ms = 126 ms more a step) takes a decoding
# chat's inter-token latency past the default 120 ms SLO on llama-3-8b@h200, while 0.5 costs
# 14 ms a step.
LINK_SERVICE_SECONDS: Final = 0.014
_HEALTHY = Faults()


def memory_used_bytes(preset: Preset) -> int:
    """What the engine holds from start-up: the weights, the whole KV cache pool (vLLM
    preallocates it to ``gpu_memory_utilization``) and the activation reserve."""
    kv_pool = preset.num_kv_blocks * preset.block_size * preset.model.kv_bytes_per_token
    return int(preset.model.weight_bytes + kv_pool + ACTIVATION_RESERVE_BYTES)


def link_wait_seconds(link_ratio: float) -> float:
    """The wait a step adds at ``link_ratio`` of the link taken by others."""
    return LINK_SERVICE_SECONDS * link_ratio / (1.0 - link_ratio) if link_ratio else 0.0


class SimDevice:
    """The counters and faults of one simulated GPU. Used from one thread (the engine's loop),
    except :attr:`faults`, which the text threads read (a reference, replaced whole)."""

    def __init__(self, preset: Preset, gpu_uuid: str, *, time_scale: float = 1.0) -> None:
        self.gpu_uuid = gpu_uuid
        self._scale = time_scale
        self._memory_used = memory_used_bytes(preset)
        self._memory_total = int(preset.hardware.memory_bytes)
        self.faults = _HEALTHY
        self._healthy = True
        self._busy = self._compute = self._memory = self._link = 0.0
        self._steps = self._tokens = 0
        self._xid_events: dict[int, int] = {}
        self._ecc = 0
        self._next_xid = math.inf
        self._stalled_until = -math.inf
        self._leaked = 0.0
        self._leak_counted_at: float | None = None

    # ---- the steps ------------------------------------------------------------------------------

    def step(self, parts: StepParts, healthy_seconds: float, tokens: int = 0) -> float:
        """Charge one step; its duration in simulated seconds: ``healthy_seconds`` (the
        roofline's) while no fault is set, else ``parts`` slowed by the faults."""
        self._steps += 1
        self._tokens += tokens
        scale = self._scale
        if self._healthy:
            self._busy += parts.gpu * scale
            self._compute += parts.compute * scale
            self._memory += parts.memory * scale
            return healthy_seconds
        faults = self.faults
        clock = faults.clock_ratio
        kernels = parts.gpu / clock
        link = link_wait_seconds(faults.link_ratio)
        self._busy += kernels * scale
        self._compute += parts.compute / clock * scale
        self._memory += parts.memory / clock * scale
        self._link += link * scale
        return parts.host + kernels / (1.0 - faults.cotenant_sm_ratio) + link

    # ---- faults ---------------------------------------------------------------------------------

    def set_faults(self, faults: Faults, now: float) -> Faults:
        """Replace the whole fault set at ``now`` (wall seconds); returns the one it replaced.
        A new XID code is raised at once, then every ``XID_INTERVAL_SECONDS``."""
        self._raise_due(now)
        self._leak_until(now)
        before = self.faults
        if faults.xid != before.xid:
            self._next_xid = now if faults.xid else math.inf
        self.faults = faults
        self._healthy = faults == _HEALTHY
        self._raise_due(now)
        return before

    def resume_at(self, now: float) -> float:
        """When the engine may run its next step: ``now``, or the end of the stall of an XID
        raised by then."""
        if self._next_xid <= now:
            self._raise_due(now)
        return max(now, self._stalled_until)

    def tokenize_seconds(self, text: str) -> float:
        """How long a slowed tokenizer takes over ``text`` (0 while it is healthy)."""
        per_kib = self.faults.tokenize_seconds_per_kib
        return per_kib * len(text.encode("utf-8", "surrogatepass")) / 1024 if per_kib else 0.0

    def _leak_until(self, now: float) -> None:
        """Add what the leak in force took since it was last counted (never past the GPU's
        memory)."""
        since, self._leak_counted_at = self._leak_counted_at, now
        rate = self.faults.leak_bytes_per_second
        if rate and since is not None and now > since:
            room = self._memory_total - self._memory_used - self._leaked
            self._leaked += min(rate * (now - since), max(room, 0.0))

    def _raise_due(self, now: float) -> None:
        faults = self.faults
        while self._next_xid <= now:
            at = self._next_xid
            self._xid_events[faults.xid] = self._xid_events.get(faults.xid, 0) + 1
            self._ecc += faults.ecc_uncorrected_per_xid
            self._stalled_until = max(self._stalled_until, at + faults.stall_seconds)
            self._next_xid = at + XID_INTERVAL_SECONDS

    # ---- reading ---------------------------------------------------------------------------------

    def report(self, now: float) -> DeviceReport:
        """Everything charged so far, with the XIDs raised by ``now``."""
        self._raise_due(now)
        self._leak_until(now)
        return DeviceReport(
            gpu_uuid=self.gpu_uuid,
            busy_seconds=self._busy,
            compute_seconds=self._compute,
            memory_seconds=self._memory,
            link_seconds=self._link,
            steps=self._steps,
            tokens=self._tokens,
            memory_used_bytes=self._memory_used + int(self._leaked),
            memory_total_bytes=self._memory_total,
            faults=self.faults,
            xid_events=dict(self._xid_events),
            ecc_uncorrected_total=self._ecc,
        )
