"""The simulated GPU under ``--engine sim``: what the engine reports of it, and the faults a drill
sets on it.

The simulated engine owns the physics. Every step it runs is charged to its simulated GPU (how
long the GPU was busy, how much of that the tensor pipes and DRAM were working, the memory the
engine holds), and the faults set on it slow those steps as the real fault would: held-down
clocks stretch every kernel, another process takes SM time and memory, a saturated link makes
steps wait, an XID stalls the engine while it recovers. The service answers
``GET`` :data:`DEVICE_PATH` with a :class:`DeviceReport`; ``governor exporter --fake-gpus N
--follow URL`` reads it on its own clock, so the fake GPU the engine runs on shows the engine's
load and the faults in the same series a real GPU would (clock-event reasons, a second process,
XID events). A drill sets faults with ``PUT`` :data:`FAULTS_PATH` (the admin token), the whole
set at once: ``{}`` heals everything::

    >>> faults = Faults.from_dict({"clock_ratio": 0.55, "clock_reasons": ["hw_thermal"]})
    >>> faults.clock_ratio, faults.clock_reasons, faults.healthy
    (0.55, ('hw_thermal',), False)
    >>> Faults.from_dict({"clock_ratio": 3})
    Traceback (most recent call last):
    ...
    governor.contracts.simdevice.FaultsError: clock_ratio must be a number in [0.1, 1], got 3

Both sides import this module: the report crosses an HTTP hop as the JSON of
:meth:`DeviceReport.as_dict`, read back by :meth:`DeviceReport.from_dict`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final

from governor.contracts.metrics import gpu

DEVICE_PATH: Final = "/sim/device"
FAULTS_PATH: Final = "/admin/sim/faults"

# The clock-event reasons a fault may name (NVML's, as the exporter's ``reason`` label says them).
FAULT_REASONS: Final = (gpu.REASON_SW_POWER_CAP, gpu.REASON_HW_SLOWDOWN, gpu.REASON_SYNC_BOOST,
                        gpu.REASON_SW_THERMAL, gpu.REASON_HW_THERMAL, gpu.REASON_HW_POWER_BRAKE)
# While ``Faults.xid`` is set, the GPU raises it this often (a flapping GPU), each time stalling
# the engine for ``Faults.stall_seconds``.
XID_INTERVAL_SECONDS: Final = 20.0
MAX_STALL_SECONDS: Final = 30.0
MAX_TOKENIZE_SECONDS_PER_KIB: Final = 1.0
# Leaked CUDA contexts: processes that hold this much GPU memory each and run nothing.
MAX_STRAY_PROCESSES: Final = 8
STRAY_PROCESS_MEMORY_BYTES: Final = 512 * 1024 * 1024
# The fastest leak a drill may set: a whole H200 in about a minute.
MAX_LEAK_BYTES_PER_SECOND: Final = 2.0**31
# The first fake GPU's UUID, and the GPU the engine runs on: the exporter's fake GPUs are numbered
# from here, so the engine's ``governor_engine_gpu_info`` and the exporter's ``gpu_info`` meet.
FAKE_UUID_PREFIX: Final = 0xFA4E


class FaultsError(ValueError):
    """A faults body that is not a valid set of faults: the message names the field, and so does
    ``param`` (None when the body is not an object), as an API error's ``param`` does."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Faults:
    """What is wrong with the simulated GPU (and the service's tokenizer) now; the defaults are
    a healthy GPU."""

    # The SM clock held at this share of its maximum, and the clock-event reasons holding it.
    clock_ratio: float = 1.0
    clock_reasons: tuple[str, ...] = ()
    # Another process on the GPU: its share of the SM time, and the memory it holds.
    cotenant_sm_ratio: float = 0.0
    cotenant_memory_bytes: int = 0
    # Others' traffic on the GPU's links (PCIe and NVLink), as a share of their capacity.
    link_ratio: float = 0.0
    # An XID the GPU raises every XID_INTERVAL_SECONDS (0: none), with uncorrected ECC errors
    # counted at each, and how long each stalls the engine.
    xid: int = 0
    ecc_uncorrected_per_xid: int = 0
    stall_seconds: float = 0.0
    # The service's tokenizer slows down by this many seconds per KiB of prompt.
    tokenize_seconds_per_kib: float = 0.0
    # Leaked contexts left on the GPU (each holding STRAY_PROCESS_MEMORY_BYTES, running
    # nothing), and the engine's own memory growing this fast, whether it serves or not (what
    # it leaked stays held after the fault is healed, as a real leak's memory does).
    stray_processes: int = 0
    leak_bytes_per_second: float = 0.0

    @property
    def healthy(self) -> bool:
        return self == Faults()

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["clock_reasons"] = list(self.clock_reasons)
        return values

    @classmethod
    def from_dict(cls, body: object) -> Faults:
        """Faults from a JSON object; a :class:`FaultsError` naming the first bad field."""
        if not isinstance(body, Mapping):
            raise FaultsError(f"faults must be a JSON object, got {type(body).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in body if k not in known)
        if unknown:
            raise FaultsError(f"unknown fault {unknown[0][:40]!r}: one of "
                              f"{', '.join(sorted(known))}", unknown[0][:40])
        faults = cls(
            clock_ratio=_number(body, "clock_ratio", 1.0, 0.1, 1.0),
            clock_reasons=_reasons(body.get("clock_reasons", ())),
            cotenant_sm_ratio=_number(body, "cotenant_sm_ratio", 0.0, 0.0, 0.95),
            cotenant_memory_bytes=int(_number(body, "cotenant_memory_bytes", 0, 0, 2.0**50,
                                              integer=True)),
            link_ratio=_number(body, "link_ratio", 0.0, 0.0, 0.99),
            xid=int(_number(body, "xid", 0, 0, 1023, integer=True)),
            ecc_uncorrected_per_xid=int(_number(body, "ecc_uncorrected_per_xid", 0, 0, 1000,
                                                integer=True)),
            stall_seconds=_number(body, "stall_seconds", 0.0, 0.0, MAX_STALL_SECONDS),
            tokenize_seconds_per_kib=_number(body, "tokenize_seconds_per_kib", 0.0, 0.0,
                                             MAX_TOKENIZE_SECONDS_PER_KIB),
            stray_processes=int(_number(body, "stray_processes", 0, 0, MAX_STRAY_PROCESSES,
                                        integer=True)),
            leak_bytes_per_second=_number(body, "leak_bytes_per_second", 0.0, 0.0,
                                          MAX_LEAK_BYTES_PER_SECOND),
        )
        if faults.clock_ratio < 1.0 and not faults.clock_reasons:
            raise FaultsError("clock_ratio below 1 needs the clock_reasons that hold it down",
                              "clock_reasons")
        return faults


def _number(body: Mapping[str, Any], name: str, default: float, low: float, high: float,
            *, integer: bool = False) -> float:
    value = body.get(name, default)
    kind = "an integer" if integer else "a number"
    # Compared before any conversion: a 400-digit integer is a number JSON allows, and one
    # float() cannot hold.
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            (integer and not isinstance(value, int)) or not low <= value <= high:
        raise FaultsError(f"{name} must be {kind} in [{low:g}, {high:g}], got {value!r:.40}",
                          name)
    return float(value) if not integer else value


def _reasons(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or len(value) > len(FAULT_REASONS):
        raise FaultsError(f"clock_reasons must be a list of {', '.join(FAULT_REASONS)}",
                          "clock_reasons")
    bad = [r for r in value if r not in FAULT_REASONS]
    if bad:
        raise FaultsError(f"clock_reasons: {str(bad[0])[:40]!r} is not one of "
                          f"{', '.join(FAULT_REASONS)}", "clock_reasons")
    return tuple(sorted(set(value), key=FAULT_REASONS.index))


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """The simulated GPU as the engine left it: cumulative counters since the engine started
    (a reader differences two reports for rates), the memory held now, the faults in force.

    Seconds are wall seconds (the engine's simulated seconds times its time scale).
    """

    gpu_uuid: str
    busy_seconds: float  # the GPU executed the engine's kernels
    compute_seconds: float  # of which the tensor pipes were busy (GEMMs, prefill attention)
    memory_seconds: float  # DRAM streamed at full bandwidth (weights, KV reads)
    link_seconds: float  # steps waited on the link
    steps: int
    tokens: int  # scheduled tokens, prompt and decode
    memory_used_bytes: int  # weights, KV cache and activations the engine holds
    memory_total_bytes: int
    faults: Faults = field(default_factory=Faults)
    # Every XID raised so far, by code, and the uncorrected ECC errors that came with them.
    xid_events: Mapping[int, int] = field(default_factory=dict)
    ecc_uncorrected_total: int = 0

    def as_dict(self) -> dict[str, Any]:
        body = {f.name: getattr(self, f.name) for f in fields(self)}
        body["faults"] = self.faults.as_dict()
        body["xid_events"] = {str(code): count for code, count in sorted(self.xid_events.items())}
        return body

    @classmethod
    def from_dict(cls, body: object) -> DeviceReport:
        """A report from its JSON; ``ValueError`` for anything that is not one."""
        if not isinstance(body, Mapping):
            raise ValueError("a device report must be a JSON object")
        try:
            events = _events(body.get("xid_events", {}))
            return cls(
                gpu_uuid=_uuid(body.get("gpu_uuid")),
                busy_seconds=_counter(body, "busy_seconds"),
                compute_seconds=_counter(body, "compute_seconds"),
                memory_seconds=_counter(body, "memory_seconds"),
                link_seconds=_counter(body, "link_seconds"),
                steps=int(_counter(body, "steps")),
                tokens=int(_counter(body, "tokens")),
                memory_used_bytes=int(_counter(body, "memory_used_bytes")),
                memory_total_bytes=int(_counter(body, "memory_total_bytes")),
                faults=Faults.from_dict(body.get("faults", {})),
                xid_events=events,
                ecc_uncorrected_total=int(_counter(body, "ecc_uncorrected_total")),
            )
        except (KeyError, TypeError, FaultsError) as exc:
            raise ValueError(f"not a device report: {exc}") from exc


# Above any count a report can reach, and within what a float holds exactly enough.
_MAX_COUNTER = 2.0**63


def _counter(body: Mapping[str, Any], name: str) -> float:
    value = body.get(name, 0)
    # NaN fails both comparisons; a huge integer is compared before float() could overflow.
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not 0 <= value < _MAX_COUNTER:
        raise ValueError(f"{name} must be a finite number ≥ 0, got {value!r:.40}")
    return float(value)


def _uuid(value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= 96:
        raise TypeError(f"gpu_uuid must be a GPU's UUID, got {value!r:.40}")
    return value


def _events(value: object) -> dict[int, int]:
    """``{"79": 2}`` → ``{79: 2}``: XID codes (decimal strings) and their counts."""
    if not isinstance(value, Mapping):
        raise TypeError("xid_events must be an object of XID code → count")
    events = {}
    for code, count in value.items():
        if not (isinstance(code, str) and code.isdecimal() and len(code) <= 4) or \
                isinstance(count, bool) or not isinstance(count, int) or \
                not 0 <= count < _MAX_COUNTER:
            raise TypeError(f"xid_events: {str(code)[:20]!r}: {count!r:.40} is not an XID code "
                            "and a count")
        events[int(code)] = count
    return events


def fake_gpu_uuid(index: int, seed: int = 0) -> str:
    """The UUID the exporter's fake GPU ``index`` reports (``--fake-gpus``, seeded like it).

    >>> fake_gpu_uuid(0)
    'GPU-fa4e0000-0000-0000-0000-000000000000'
    """
    number = (FAKE_UUID_PREFIX << 112) + (seed << 32) + index * 16
    return f"GPU-{uuid.UUID(int=number)}"
