"""Where a vLLM engine runs: the GPUs it was given, by UUID, and its data-parallel rank.

The GPUs come from ``CUDA_VISIBLE_DEVICES`` as CUDA reads it: a comma-separated list of indices or
UUIDs (``GPU-…``, a unique prefix of one, or ``MIG-…``); the first entry that is not one (a
negative or unknown index, a repeat, anything else) hides itself and every entry after it. Unset
or empty, every GPU is visible (vLLM treats empty as unset). Indices are NVML's, as vLLM maps
them, and NVML names each GPU by UUID, the name the GPU exporter's ``uuid`` label uses; without
NVML an index stays an index (:attr:`~.capabilities.Placement.gpu_indices`). Of the visible
GPUs, the engine uses the first ``world_size * data_parallel_size_local`` (vLLM hands each local
rank its slice in order). A CPU engine has none::

    >>> visible_entries("0,GPU-8932f937,x,1")
    ('0', 'GPU-8932f937')
    >>> resolve(visible_entries("1,0"), ("GPU-a", "GPU-b"))
    ('GPU-b', 'GPU-a')
    >>> resolve(visible_entries("1,0"), None)
    ('1', '0')

vLLM 0.32 does not report which data-parallel rank served a request (``RequestOutput`` carries
none): the rank is known when this engine serves one rank only (no data parallelism, or an
external or hybrid load balancer with one local rank), and left out otherwise.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from governor.inference.engines.capabilities import Placement

log = logging.getLogger(__name__)

VISIBLE_DEVICES: Final = "CUDA_VISIBLE_DEVICES"
# More entries than any machine has GPUs (or MIG devices) are not read.
MAX_ENTRIES: Final = 64
_INDEX = re.compile(r"[0-9]{1,4}")
# NVML's UUIDs: GPU-<hex and dashes>, MIG-<...> (also the older MIG-GPU-<uuid>/<gi>/<ci>).
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z/-]{1,96}")


class Nvml(Protocol):
    """The NVML calls naming GPUs (``pynvml`` of nvidia-ml-py, or a fake in tests)."""

    @property
    def NVMLError(self) -> type[Exception]: ...

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> Any: ...


def visible_entries(value: str | None) -> tuple[str, ...] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` up to the first that CUDA would refuse;
    ``None`` when unset or empty (every GPU)."""
    if value is None or not value.strip():
        return None
    entries: list[str] = []
    for raw in value.split(",")[:MAX_ENTRIES]:
        entry = raw.strip()
        if not (_INDEX.fullmatch(entry) or _UUID.fullmatch(entry)) or entry in entries:
            break
        entries.append(str(int(entry)) if entry.isdigit() else entry)
    return tuple(entries)


def resolve(entries: tuple[str, ...] | None,
            uuids: Sequence[str] | None) -> tuple[str, ...]:
    """Each visible entry as a UUID where ``uuids`` (NVML's, in index order) can name it;
    stops at an index or prefix NVML does not have, as CUDA does. Without NVML, entries stay as
    given; unset with no NVML, nothing is known."""
    if entries is None:
        return tuple(uuids or ())
    if uuids is None:
        return entries
    out: list[str] = []
    for entry in entries:
        named = _name(entry, uuids)
        if named is None or named in out:
            break
        out.append(named)
    return tuple(out)


def _name(entry: str, uuids: Sequence[str]) -> str | None:
    if entry.isdigit():
        index = int(entry)
        return uuids[index] if index < len(uuids) else None
    if entry.startswith("MIG-"):
        return entry  # a MIG device's own UUID; NVML lists only whole GPUs by index
    matches = [uuid for uuid in uuids if uuid.startswith(entry)]
    return matches[0] if len(matches) == 1 else None


def nvml_uuids(load: Callable[[], Nvml]) -> tuple[str, ...] | None:
    """Every GPU's UUID in NVML's index order, or ``None`` when NVML cannot be used."""
    try:
        nvml = load()
        nvml.nvmlInit()
    except Exception as exc:  # no library, no driver, no permission: the UUIDs stay unknown
        log.info("NVML unavailable (%s): GPUs given by index stay indices on spans",
                 type(exc).__name__)
        return None
    try:
        count = nvml.nvmlDeviceGetCount()
        return tuple(_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
                     for i in range(count))
    except nvml.NVMLError as exc:
        log.info("NVML could not name the GPUs (%s)", exc)
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            log.debug("nvmlShutdown failed", exc_info=True)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def data_parallel_rank(parallel: Any) -> int | None:
    """The one rank this engine serves, or ``None`` when its frontend spreads requests over
    several (vLLM's internal load balancing)."""
    if int(parallel.data_parallel_size) == 1:
        return 0
    balanced_outside = parallel.data_parallel_external_lb or parallel.data_parallel_hybrid_lb
    if balanced_outside and int(parallel.data_parallel_size_local) == 1:
        return int(parallel.data_parallel_rank)
    return None


def engine_placement(vllm_config: Any, env: Mapping[str, str],
                     load_nvml: Callable[[], Nvml]) -> Placement:
    """The placement of the engine ``vllm_config`` describes, started with ``env``."""
    parallel = vllm_config.parallel_config
    size, rank = int(parallel.data_parallel_size), data_parallel_rank(parallel)
    if vllm_config.device_config.device_type != "cuda":
        return Placement(data_parallel_size=size, data_parallel_rank=rank)
    entries = visible_entries(env.get(VISIBLE_DEVICES))
    needs_nvml = entries is None or any(not e.startswith("MIG-") for e in entries)
    gpus = resolve(entries, nvml_uuids(load_nvml) if needs_nvml else None)
    used = gpus[:max(1, int(parallel.world_size) * max(1, int(parallel.data_parallel_size_local)))]
    return Placement(gpu_uuids=tuple(g for g in used if not g.isdigit()),
                     gpu_indices=tuple(g for g in used if g.isdigit()),
                     data_parallel_size=size, data_parallel_rank=rank)


def import_pynvml() -> Nvml:
    """nvidia-ml-py's bindings (vLLM's CUDA builds depend on it)."""
    import pynvml

    api: Nvml = pynvml
    return api
