"""The vLLM engine's place on its spans: the GPUs ``CUDA_VISIBLE_DEVICES`` gives it, named by
NVML's UUIDs (the exporter's fake NVML here), hostile values read as CUDA reads them, and the
data-parallel rank from vLLM's own configuration objects."""

from __future__ import annotations

import doctest
from types import SimpleNamespace
from typing import Any, Literal

import pytest

from governor.contracts.simdevice import fake_gpu_uuid
from governor.exporters.gpu import nvml as nv
from governor.exporters.gpu.fake import FakeNvml
from governor.inference.engines.capabilities import Placement
from governor.inference.engines.vllm import placement
from governor.inference.engines.vllm.placement import (
    engine_placement,
    nvml_uuids,
    resolve,
    visible_entries,
)

# vLLM's own configuration objects (make venv-test, which has no vLLM, collects every file).
vllm_config = pytest.importorskip("vllm.config", reason="vLLM's configuration (make venv-vllm)")
DeviceConfig, ParallelConfig = vllm_config.DeviceConfig, vllm_config.ParallelConfig

GPU = [fake_gpu_uuid(i) for i in range(4)]


def test_the_docstring_examples_run() -> None:
    result = doctest.testmod(placement)
    assert result.attempted > 0 and result.failed == 0


def named(value: str | None, gpus: int | None = 4) -> tuple[str, ...]:
    """What ``CUDA_VISIBLE_DEVICES=value`` names on a machine of ``gpus`` GPUs (None: no NVML)."""
    uuids = None if gpus is None else nvml_uuids(lambda: FakeNvml(gpus))
    return resolve(visible_entries(value), uuids)


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param(None, GPU, id="unset: every GPU"),
    pytest.param("", GPU, id="empty: every GPU, as vLLM reads it"),
    pytest.param("2", [GPU[2]], id="one index"),
    pytest.param(" 3 , 1 ", [GPU[3], GPU[1]], id="indices in their order, blanks ignored"),
    pytest.param("0,1,7,2", GPU[:2], id="an index past the last GPU hides it and the rest"),
    pytest.param("-1", [], id="-1 hides every GPU"),
    pytest.param("1,1", [GPU[1]], id="a repeat hides itself and the rest"),
    pytest.param("0,GPU-fa4e0000-0000-0000-0000-000000000000", [GPU[0]],
                 id="an index and the same GPU's UUID"),
    pytest.param(GPU[2], [GPU[2]], id="a UUID"),
    pytest.param(GPU[1][:-1] + "," + GPU[0], [GPU[1], GPU[0]], id="a unique UUID prefix"),
    pytest.param("GPU-fa4e", [], id="a prefix of several UUIDs is no GPU"),
    pytest.param("GPU-00000000-dead-beef-0000-000000000000", [], id="an unknown UUID"),
    pytest.param("MIG-5c0e0000-0000-0000-0000-000000000001", [
        "MIG-5c0e0000-0000-0000-0000-000000000001"], id="a MIG device, as given"),
    pytest.param("0,cuda:1", [GPU[0]], id="not an index or a UUID"),
    pytest.param("0,1\n2", [GPU[0]], id="a newline inside an entry"),
    pytest.param("0;rm -rf /", [], id="shell characters"),
    pytest.param("0," + "1" * 5000, [GPU[0]], id="an oversized index"),
    pytest.param("GPU-" + "a" * 5000, [], id="an oversized UUID"),
    pytest.param(",".join(["0"] * 100000), [GPU[0]], id="a hundred thousand entries"),
    pytest.param("\udcff\x00", [], id="bytes that are not text"),
    pytest.param("9" * 20, [], id="an index larger than any integer type"),
])
def test_cuda_visible_devices_names_what_cuda_would_show(
        value: str | None, expected: list[str]) -> None:
    assert named(value) == tuple(expected)


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param("0,1", ("0", "1"), id="indices stay indices"),
    pytest.param(GPU[1], (GPU[1],), id="a UUID stays a UUID"),
    pytest.param("1,x,2", ("1",), id="still read as CUDA reads it"),
    pytest.param(None, (), id="unset: nothing known"),
])
def test_without_nvml_entries_stay_as_given(value: str | None, expected: tuple[str, ...]) -> None:
    assert named(value, gpus=None) == expected


@pytest.mark.parametrize("code", [nv.ERROR_LIBRARY_NOT_FOUND, nv.ERROR_DRIVER_NOT_LOADED,
                                  nv.ERROR_NO_PERMISSION])
def test_nvml_that_cannot_start_names_nothing(code: int) -> None:
    assert nvml_uuids(lambda: FakeNvml(2, init_error=code)) is None


def test_nvml_failing_midway_names_nothing_and_is_shut_down() -> None:
    fake = FakeNvml(3)
    fake.fail("nvmlDeviceGetUUID", nv.ERROR_GPU_IS_LOST, gpu=1)
    assert nvml_uuids(lambda: fake) is None
    assert fake.calls["nvmlShutdown"] == 1


def test_no_nvml_bindings_names_nothing() -> None:
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    assert nvml_uuids(missing) is None


def config(device: Literal["cuda", "cpu"] = "cuda", **parallel: Any) -> SimpleNamespace:
    """The two parts of a ``VllmConfig`` the placement reads, as vLLM builds them."""
    return SimpleNamespace(parallel_config=ParallelConfig(**parallel),
                           device_config=DeviceConfig(device=device))


@pytest.mark.parametrize(("parallel", "visible", "expected"), [
    pytest.param({}, "2,3", Placement((GPU[2],), (), 1, 0), id="one GPU of two given"),
    pytest.param({"tensor_parallel_size": 2}, None, Placement(tuple(GPU[:2]), (), 1, 0),
                 id="tensor parallel: the first two"),
    pytest.param({"data_parallel_size": 4, "data_parallel_size_local": 1,
                  "data_parallel_rank": 2, "data_parallel_external_lb": True}, "3",
                 Placement((GPU[3],), (), 4, 2), id="external load balancing: its one rank"),
    pytest.param({"data_parallel_size": 2, "data_parallel_size_local": 2}, None,
                 Placement(tuple(GPU[:2]), (), 2, None),
                 id="internal load balancing: two ranks, which one unknown"),
])
def test_the_placement_of_a_gpu_engine(parallel: dict[str, Any], visible: str | None,
                                       expected: Placement) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert engine_placement(config(**parallel), env, lambda: FakeNvml(4)) == expected


def test_without_nvml_given_indices_are_kept_apart_from_uuids() -> None:
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    got = engine_placement(config(tensor_parallel_size=2), {"CUDA_VISIBLE_DEVICES": "5,4"},
                           missing)
    assert got == Placement(gpu_uuids=(), gpu_indices=("5", "4"))


def test_a_cpu_engine_has_no_gpu_whatever_the_environment_says() -> None:
    def untouched() -> Any:
        raise AssertionError("a CPU engine must not load NVML")

    got = engine_placement(config("cpu"), {"CUDA_VISIBLE_DEVICES": "0,1"}, untouched)
    assert got == Placement(gpu_uuids=(), gpu_indices=(), data_parallel_size=1,
                            data_parallel_rank=0)
