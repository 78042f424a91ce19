"""``governor serve``: the inference service. Every option also reads ``GOVERNOR_<OPTION>``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiohttp import web

from governor.admission.deadline import DEFAULT_CALIBRATION_QUANTILE, first_token_targets
from governor.common.cli import (
    EnvArgumentParser,
    env_name,
    non_negative_int,
    parse_duration_seconds,
    positive_int,
    quantile_or_off,
)
from governor.common.logs import add_logging_options, setup_logging
from governor.common.secrets import Secret, TokenError, read_token
from governor.contracts.admission import slack_range, slack_text
from governor.contracts.metrics.latency import HISTOGRAM_BUCKETS
from governor.contracts.tokens import (
    ADMIN_TOKEN_ENV,
    ADMIN_TOKEN_FILE_ENV,
    PROBE_TOKEN_ENV,
    PROBE_TOKEN_FILE_ENV,
)
from governor.inference.config import (
    AdmissionSettings,
    ConnectionSettings,
    ServiceConfig,
)
from governor.inference.engines.registry import engine_names, load_engine
from governor.inference.engines.settings import EngineSettings
from governor.inference.http.listener import allow_open_files, listening, stopped
from governor.inference.telemetry.request_log import (
    RequestLogPathError,
    RequestLogSettings,
    open_log,
)
from governor.inference.telemetry.tracing import (
    TracingSettings,
    check_tracing_env,
    traces_endpoint,
)
from governor.inference.textwork import SMALL_BODY_BYTES
from governor.inference.warmup import DEFAULT_PROMPT_TOKENS, MAX_ROUNDS, WarmupSettings
from governor.slo.classes import RequestClasses
from governor.slo.service_buckets import service_edges
from governor.slo.spec import SloSpec, SpecError, load_spec

log = logging.getLogger(__name__)
# The engine never became ready (a model without weights, no GPU memory, a bad option).
EXIT_ENGINE_FAILED = 3


def build_parser(env: Mapping[str, str] | None = None) -> EnvArgumentParser:
    # Every default is read from the configuration the option fills, never typed twice.
    service, engine = ServiceConfig(), EngineSettings()
    admission, tracing = AdmissionSettings(), TracingSettings()
    connections, request_log = ConnectionSettings(), RequestLogSettings()
    warmup = WarmupSettings()
    p = EnvArgumentParser(prog="governor serve", env_prefix="GOVERNOR_SERVE_",
                          legacy_prefix="GOVERNOR_", description=__doc__, env=env)
    p.add_argument("--host", default=service.host, help="listen address")
    p.add_argument("--port", type=positive_int, default=service.port, help="listen port")
    p.add_argument("--engine", choices=engine_names(), default=engine.kind,
                   help="sim: the embedded simulated engine (no GPU); vllm: real vLLM; any "
                        "other installed engine by name")
    p.add_argument("--model", default=engine.model, help="vllm: model directory or name")
    p.add_argument("--served-model-name", default=engine.served_model_name,
                   help="the name clients pass as 'model' (default: the model or preset)")
    p.add_argument("--preset", default=engine.preset, help="sim: model@hardware preset")
    p.add_argument("--max-num-seqs", type=positive_int, default=engine.max_num_seqs,
                   help="start-up running-request cap, also the ceiling of live retuning")
    p.add_argument("--max-num-batched-tokens", type=positive_int,
                   default=engine.max_num_batched_tokens,
                   help="start-up per-step token budget, also the ceiling of live retuning")
    p.add_argument("--min-num-seqs", type=positive_int, default=engine.min_num_seqs,
                   help="floor the admin API accepts for max_num_seqs")
    p.add_argument("--min-num-batched-tokens", type=positive_int,
                   default=engine.min_num_batched_tokens,
                   help="floor the admin API accepts for max_num_batched_tokens")
    p.add_argument("--max-model-len", type=positive_int, default=engine.max_model_len,
                   help="context length (prompt + output tokens)")
    p.add_argument("--seed", type=int, default=engine.seed, help="sim: random seed")
    p.add_argument("--time-scale", type=float, default=engine.time_scale,
                   help="sim: wall seconds per simulated second (0: steps cost nothing)")
    p.add_argument("--gpu-uuid", default=engine.gpu_uuid,
                   help="sim: the UUID of the simulated GPU the engine runs on (default: the "
                        "first fake GPU of governor exporter --fake-gpus, which follows it with "
                        "--follow)")
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="vllm: an extra AsyncEngineArgs field, repeatable")
    p.add_argument("--admin-token-file", default=None, env=ADMIN_TOKEN_FILE_ENV,
                   old_env=(env_name("--admin-token-file", p.env_prefix),),
                   help=f"file holding the admin bearer token (or set {ADMIN_TOKEN_ENV})")
    p.add_argument("--probe-token-file", default=None, env=PROBE_TOKEN_FILE_ENV,
                   help="file holding the synthetic probe's token (or set "
                        f"{PROBE_TOKEN_ENV}): a request whose X-Governor-Probe header carries "
                        "it is left out of the request and latency series; without one, every "
                        "request counts")
    p.add_argument("--max-body-bytes", type=positive_int, default=service.max_body_bytes,
                   help="largest accepted request body")
    p.add_argument("--max-in-flight", type=positive_int, default=admission.max_in_flight,
                   help="requests admitted to the engine at once")
    p.add_argument("--max-queue", type=non_negative_int, default=admission.max_queue,
                   help="requests waiting for admission before 429")
    p.add_argument("--queue-timeout", type=parse_duration_seconds,
                   default=admission.queue_timeout_seconds,
                   help="longest wait for admission before 503")
    p.add_argument("--max-connections", type=positive_int, default=connections.max_connections,
                   help="open connections at most; one more is answered 503 and closed at once "
                        "(GET /health and /metrics are served anyway, on a few reserved places)")
    p.add_argument("--max-connections-per-client", type=positive_int,
                   default=connections.max_connections_per_client,
                   help="open connections one client address may hold (unset: half of "
                        "--max-connections); one more is refused like one past the cap. Behind "
                        "a proxy every client has the proxy's address: raise it to "
                        "--max-connections")
    p.add_argument("--header-timeout", type=parse_duration_seconds,
                   default=connections.header_timeout_seconds,
                   help="a request's headers must arrive within this of its first byte (of a "
                        "new connection's opening), else the connection is closed")
    p.add_argument("--write-timeout", type=parse_duration_seconds,
                   default=connections.write_timeout_seconds,
                   help="longest a write may wait for a client that does not read; then its "
                        "request ends (counted 408) and its engine slot is free")
    p.add_argument("--stream-send-buffer", type=non_negative_int,
                   default=connections.stream_send_buffer_bytes, metavar="BYTES",
                   help="cap a stream's socket send buffer at this and let its writes wait for "
                        "the kernel: a slow reader then shows in the inter-token histogram "
                        "instead of queueing unseen (0: the kernel's own buffer)")
    p.add_argument("--body-timeout", type=parse_duration_seconds,
                   default=connections.body_timeout_seconds,
                   help="a request body must arrive within this plus a second per MiB of it, "
                        "else a 408 and the connection is closed")
    p.add_argument("--request-timeout", type=parse_duration_seconds,
                   default=connections.request_timeout_seconds,
                   help="longest a request may run from arrival to its last byte: 408 if its "
                        "body had not arrived, else 504")
    p.add_argument("--slo", type=Path, default=None,
                   help="the SLO spec whose request classes the service applies (vLLM "
                        "priority, per-class admission, the class label); default: none, one "
                        "class for every request")
    p.add_argument("--deadlines", action="store_true",
                   help="first-token deadlines from --slo: a request is refused (429) when the "
                        "prompt tokens ahead of it, and its own, would take longer to prefill "
                        "than its class's first-token target leaves, and shed (429) if it waits "
                        "for an engine slot when that deadline passes")
    p.add_argument("--ttft-slo", default=None,
                   help="with --deadlines: the latency SLO of --slo whose per-class thresholds "
                        "are the deadlines (default: the one with `role: ttft`; '' for none)")
    p.add_argument("--deadline-slack", type=_slack, default=admission.deadline_slack,
                   help="with --deadlines: each deadline is this times its class's first-token "
                        "target (above 1 admits more that may be late, below 1 refuses earlier; "
                        f"within {slack_range()})")
    p.add_argument("--deadline-calibration", type=quantile_or_off,
                   default=DEFAULT_CALIBRATION_QUANTILE,
                   help="with --deadlines: scale each predicted wait by this quantile (0-1] "
                        "of how late recent first tokens admitted near their deadline came "
                        "against their prediction, between 1 and 2; 'off': not at all "
                        f"(default: {DEFAULT_CALIBRATION_QUANTILE:g})")
    p.add_argument("--max-tokens-ahead", type=non_negative_int, default=None,
                   help="refuse (429) a request with more than this many prompt tokens ahead "
                        "of it, deadline or not (default: no such bound)")
    p.add_argument("--tokenizer-threads", type=positive_int, default=service.tokenizer_threads,
                   help="threads that decode, validate, render and tokenize requests, off the "
                        "event loop; as many requests with large bodies (over "
                        f"{SMALL_BODY_BYTES // 1024} KiB) are read at once")
    p.add_argument("--max-tokens-limit", type=positive_int, default=service.max_tokens_limit,
                   help="largest max_tokens a request may ask for")
    p.add_argument("--otlp-endpoint", default=tracing.otlp_endpoint,
                   help="OTLP/HTTP base URL for traces (or the OTEL_EXPORTER_OTLP_* variables)")
    p.add_argument("--service-name", default=tracing.service_name,
                   help="service.name of the spans (OTEL_SERVICE_NAME wins)")
    p.add_argument("--request-log", type=Path, default=None, metavar="FILE",
                   help="write one JSON line per generation request to FILE (arrival, route, "
                        "class, token counts, TTFT, its own ITL P99, status, stages; never its "
                        "text), for governor bench controller --workload FILE")
    p.add_argument("--request-log-max-bytes", type=positive_int, default=request_log.max_bytes,
                   help="rotate the request log past this size")
    p.add_argument("--request-log-backups", type=non_negative_int, default=request_log.backups,
                   help="rotated request logs kept (FILE.1 …)")
    p.add_argument("--warmup", type=_warmup_rounds, default=warmup.rounds, metavar="ROUNDS",
                   help="before /health answers 200, send the engine this many rounds of "
                        "requests, one per prompt size the --slo classes name (and "
                        f"{', '.join(map(str, DEFAULT_PROMPT_TOKENS))} tokens), "
                        f"{warmup.max_tokens} output tokens each; never counted in the "
                        f"service's series; 0: no warm-up (at most {MAX_ROUNDS})")
    p.add_argument("--keep-serving-on-engine-failure", action="store_true",
                   help="when the engine fails to start, stay up answering 503 on /health "
                        "(for debugging) instead of exiting with status 3")
    add_logging_options(p)
    return p


def _token(path: str | None, variable: str, env: Mapping[str, str]) -> Secret | None:
    try:
        return read_token(path or None, variable, env)
    except TokenError as exc:
        raise SystemExit(f"governor serve: {exc}") from None


def _warmup_rounds(text: str) -> int:
    rounds = non_negative_int(text)
    if rounds > MAX_ROUNDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_ROUNDS} rounds: {text!r}")
    return rounds


def _slack(text: str) -> float:
    value = slack_text(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"must be a number within {slack_range()}: {text[:40]!r}")
    return value


def _spec(path: Path | None) -> SloSpec | None:
    if path is None:
        return None
    try:
        return load_spec(path, histograms=HISTOGRAM_BUCKETS)
    except SpecError as exc:
        raise SystemExit(f"governor serve: --slo: {exc}") from None


def _admission(args: argparse.Namespace, spec: SloSpec | None) -> AdmissionSettings:
    if args.deadlines and spec is None:
        raise SystemExit("governor serve: --deadlines needs --slo: the deadlines are its "
                         "classes' first-token targets")
    try:
        targets = first_token_targets(spec, args.ttft_slo) if spec and args.deadlines else {}
    except ValueError as exc:
        raise SystemExit(f"governor serve: --ttft-slo: {exc}") from None
    return AdmissionSettings(max_in_flight=args.max_in_flight, max_queue=args.max_queue,
                             queue_timeout_seconds=args.queue_timeout,
                             first_token_targets=tuple(sorted(targets.items())),
                             deadline_slack=args.deadline_slack,
                             max_tokens_ahead=args.max_tokens_ahead,
                             deadline_calibration=args.deadline_calibration)


def config_from_args(args: argparse.Namespace, env: Mapping[str, str]) -> ServiceConfig:
    for item in args.engine_arg:
        if "=" not in item:
            raise SystemExit(f"governor serve: --engine-arg {item!r} is not KEY=VALUE")
    if args.time_scale < 0:
        raise SystemExit("governor serve: --time-scale must not be negative")
    tracing = TracingSettings(otlp_endpoint=args.otlp_endpoint, service_name=args.service_name)
    try:
        check_tracing_env(env)
    except ValueError as exc:
        raise SystemExit(f"governor serve: {exc}") from None
    spec = _spec(args.slo)
    classes = spec.classes if spec is not None else RequestClasses()
    engine = EngineSettings(
        kind=args.engine, model=args.model, served_model_name=args.served_model_name,
        preset=args.preset, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, min_num_seqs=args.min_num_seqs,
        min_num_batched_tokens=args.min_num_batched_tokens, max_model_len=args.max_model_len,
        seed=args.seed, time_scale=args.time_scale, extra_args=tuple(args.engine_arg),
        gpu_uuid=args.gpu_uuid,
        # The same collector as the service's spans, from the flag or the OTEL_* variables,
        # so that vLLM's own llm_request spans land in the same trace.
        otlp_traces_endpoint=traces_endpoint(tracing, env),
        # Declared classes carry priorities, which vLLM honours under its priority policy only.
        scheduling_policy="priority" if classes.declared else "fcfs",
    )
    try:
        load_engine(engine.kind).check(engine)
    except ValueError as exc:
        raise SystemExit(f"governor serve: {exc}") from None
    try:
        config = ServiceConfig(
            host=args.host, port=args.port, engine=engine,
            admission=_admission(args, spec),
            connections=ConnectionSettings(
                max_connections=args.max_connections,
                max_connections_per_client=args.max_connections_per_client,
                header_timeout_seconds=args.header_timeout,
                write_timeout_seconds=args.write_timeout,
                stream_send_buffer_bytes=args.stream_send_buffer,
                request_timeout_seconds=args.request_timeout,
                body_timeout_seconds=args.body_timeout),
            tracing=tracing, classes=classes,
            request_log=RequestLogSettings(args.request_log, args.request_log_max_bytes,
                                           args.request_log_backups),
            admin_token=_token(args.admin_token_file, ADMIN_TOKEN_ENV, env),
            probe_token=_token(args.probe_token_file, PROBE_TOKEN_ENV, env),
            max_body_bytes=args.max_body_bytes,
            tokenizer_threads=args.tokenizer_threads, max_tokens_limit=args.max_tokens_limit,
            # The spec's thresholds on the service's latency histograms, each one more edge,
            # as the generated rules count them.
            latency_buckets=tuple(sorted(service_edges(spec).items())) if spec else (),
            warmup=WarmupSettings(rounds=args.warmup),
        )
    except ValueError as exc:
        raise SystemExit(f"governor serve: {exc}") from None
    _check_request_log(config.request_log.path)
    return config


def _check_request_log(path: Path | None) -> None:
    """Open the request log once at start: a path that cannot be one (a directory, a FIFO,
    under /proc, below a file) is one line and exit 1 here, not a traceback or a wait later."""
    if path is None:
        return
    try:
        open_log(path).close()
    except RequestLogPathError as exc:
        raise SystemExit(f"governor serve: --request-log {exc}") from None


async def _serve(app: web.Application, config: ServiceConfig) -> None:
    async with listening(app, config.host, config.port, config.connections):
        log.info("listening on %s:%d", config.host, config.port)
        await stopped()


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    args = build_parser(env).parse_args(list(sys.argv[1:] if argv is None else argv))
    setup_logging(args.log_level, fmt=args.log_format)
    config = config_from_args(args, env)
    from prometheus_client import CollectorRegistry

    from governor.inference.app import create_app
    from governor.inference.engines.registry import create_engine

    registry = CollectorRegistry(auto_describe=True)
    try:
        # Built here, not at start-up, so that a bad preset or model option is one clear line.
        engine = create_engine(config.engine, registry)
    except ValueError as exc:
        raise SystemExit(f"governor serve: {exc}") from None
    if config.admin_token is None:
        log.warning("no admin token set (%s): the admin API answers 401", ADMIN_TOKEN_ENV)
    if config.probe_token is None:
        log.info("no probe token set (%s): requests marked as the synthetic probe's count as "
                 "ordinary requests", PROBE_TOKEN_FILE_ENV)
    failure: list[str] = []

    def stop(cause: str) -> None:
        # Compose and Kubernetes can restart a process that exits, not one that answers 503.
        failure.append(cause)
        signal.raise_signal(signal.SIGTERM)  # run_app's handler shuts the app down cleanly

    app = create_app(config, engine_factory=lambda _config, _registry: engine, registry=registry,
                     on_engine_failure=None if args.keep_serving_on_engine_failure else stop)
    # Hand the GIL back to the event loop within 1 ms of a worker thread taking it (a /metrics
    # render, tokenizing a long prompt): tokens keep streaming meanwhile.
    sys.setswitchinterval(0.001)
    allow_open_files(config.connections.max_connections)
    asyncio.run(_serve(app, config))
    if failure:
        log.error("the engine failed to start: %s", failure[0])
        return EXIT_ENGINE_FAILED
    return 0
