"""Each component's command line, built from typed options: one builder for ``governor up``, the
Kubernetes manifests, the benchmarks and the lab.

A field is the option of the same name (``admin_token_file`` → ``--admin-token-file``); a field
left ``None`` is left out, ``True`` is a bare flag, a tuple repeats the option. Fields come out in
the order they are declared, so generated manifests never move::

    >>> Serve(engine="sim", port=8001, admin_token_file="/run/admin").argv()
    ['serve', '--engine', 'sim', '--port', '8001', '--admin-token-file', '/run/admin']
    >>> Exporter(fake_gpus=2).python()[1:]
    ['-m', 'governor', 'exporter', '--fake-gpus', '2']

Every field is an option the component's own parser accepts (``tests/common/test_commands.py``
parses each builder's output with it). :class:`VllmServe` builds stock ``vllm serve`` with
Governor's admin route in it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import ClassVar

Value = str | int | float | bool | tuple[str, ...] | None


class _Command:
    COMMAND: ClassVar[str]

    def argv(self) -> list[str]:
        """The command and its options, as ``governor`` takes them (without the program)."""
        out = [self.COMMAND]
        for item in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            out += _option(item.name, getattr(self, item.name))
        return out

    def python(self) -> list[str]:
        """The whole command line, run by this interpreter (``python -m governor …``)."""
        return [sys.executable, "-m", "governor", *self.argv()]


def _option(name: str, value: Value) -> list[str]:
    flag = "--" + name.replace("_", "-")
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, tuple):
        return [part for item in value for part in (flag, item)]
    return [flag, str(value)]


@dataclass(frozen=True, kw_only=True)
class Serve(_Command):
    """``governor serve``: the inference service."""

    COMMAND: ClassVar[str] = "serve"
    engine: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    preset: str | None = None
    host: str | None = None
    port: int | None = None
    slo: str | None = None
    admin_token_file: str | None = None
    probe_token_file: str | None = None
    log_format: str | None = None
    log_level: str | None = None
    seed: int | None = None
    time_scale: float | None = None
    gpu_uuid: str | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    min_num_seqs: int | None = None
    min_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    max_tokens_limit: int | None = None
    max_body_bytes: int | None = None
    max_in_flight: int | None = None
    max_queue: int | None = None
    tokenizer_threads: int | None = None
    otlp_endpoint: str | None = None
    request_log: str | None = None
    engine_arg: tuple[str, ...] = ()
    deadlines: bool = False
    deadline_calibration: float | str | None = None  # None: the server's default; 'off'
    warmup: int | None = None


@dataclass(frozen=True, kw_only=True)
class Controller(_Command):
    """``governor controller``: the SLO controller."""

    COMMAND: ClassVar[str] = "controller"
    slo: str | None = None
    host: str | None = None
    port: int | None = None
    prometheus: str | None = None
    targets: str | None = None
    job: str | None = None
    discover: str | None = None
    scrape_interval: str | None = None
    resync: str | None = None
    admin_token_file: str | None = None
    webhook_token_file: str | None = None
    state_file: str | None = None
    audit_log: str | None = None
    log_format: str | None = None
    log_level: str | None = None


@dataclass(frozen=True, kw_only=True)
class Exporter(_Command):
    """``governor exporter``: the GPU exporter."""

    COMMAND: ClassVar[str] = "exporter"
    fake_gpus: int | None = None
    fake_mig: str | None = None  # GPU=PROFILE[:COUNT][+…][,…]: fake GPUs in MIG mode
    follow: str | None = None  # URL[,URL]: the services whose simulated GPUs to show
    names: str | None = None
    host: str | None = None
    port: int | None = None
    interval: str | None = None
    log_format: str | None = None
    log_level: str | None = None


@dataclass(frozen=True, kw_only=True)
class Probe(_Command):
    """``governor probe``: the synthetic probe."""

    COMMAND: ClassVar[str] = "probe"
    slo: str | None = None
    target: tuple[str, ...] = ()  # NAME=URL[,URL]: where a target the spec names is reached
    probe_token_file: str | None = None
    host: str | None = None
    port: int | None = None
    log_format: str | None = None
    log_level: str | None = None


@dataclass(frozen=True, kw_only=True)
class VllmServe:
    """Stock ``vllm serve MODEL``, with Governor's admin route in it: vLLM's own server, its own
    flags (``extra`` passes any other one through, already spelled as vLLM spells it)."""

    model: str
    host: str | None = None
    port: int | None = None
    served_model_name: str | None = None
    middleware: tuple[str, ...] = ()
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    data_parallel_size: int | None = None
    api_server_count: int | None = None
    # JSON: bucket family → edges (vLLM >= 0.32; slo.yaml's vllm.custom_histogram_buckets)
    custom_histogram_buckets: str | None = None
    otlp_traces_endpoint: str | None = None
    disable_uvicorn_access_log: bool = False
    extra: tuple[str, ...] = ()

    def argv(self) -> list[str]:
        """``["vllm", "serve", MODEL, …]``: the program, its sub-command and the options."""
        out = ["vllm", "serve", self.model]
        for item in fields(self):
            if item.name not in ("model", "extra"):
                out += _option(item.name, getattr(self, item.name))
        return [*out, *self.extra]

    def python(self) -> list[str]:
        """The same, run by this interpreter (vLLM's CLI module)."""
        return [sys.executable, "-m", "vllm.entrypoints.cli.main", *self.argv()[1:]]

def vllm_flags(engine_args: Sequence[str]) -> tuple[str, ...]:
    """``governor serve``'s ``--engine-arg key=value`` pairs as ``vllm serve``'s own flags, for
    :attr:`VllmServe.extra`::

        >>> vllm_flags(["dtype=float32", "enforce_eager=true", "enable_prefix_caching=off"])
        ('--dtype', 'float32', '--enforce-eager', '--no-enable-prefix-caching')
    """
    out: list[str] = []
    for pair in engine_args:
        key, _, value = pair.partition("=")
        flag = "--" + key.strip().replace("_", "-")
        lowered = value.strip().lower()
        if lowered in {"true", "1", "yes", "on"}:
            out.append(flag)
        elif lowered in {"false", "0", "no", "off"}:
            out.append("--no-" + flag[2:])
        else:
            out += [flag, value]
    return tuple(out)
