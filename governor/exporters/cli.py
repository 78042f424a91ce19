"""``governor exporter``: the GPU exporter on NVML/GPM, port 9400.

Every option also reads a ``GOVERNOR_EXPORTER_…`` variable (``--fake-gpus`` ←
``GOVERNOR_EXPORTER_FAKE_GPUS``); the command line wins. A mistake in either is a one-line
error and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import Sequence

from aiohttp import web

from governor.common.cli import (
    EnvArgumentParser,
    non_negative_int,
    parse_bool,
    parse_duration_seconds,
    port_number,
)
from governor.common.logs import add_logging_options, setup_logging
from governor.exporters.config import NAMES, ConfigError, ExporterConfig
from governor.exporters.gpu.miglayout import LayoutError, parse_layout
from governor.exporters.server import create_app

log = logging.getLogger("exporters")

ENV_PREFIX = "GOVERNOR_EXPORTER_"


def _flag(text: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def url_list(text: str) -> tuple[str, ...]:
    """``URL[,URL…]``: the services to follow (a comma list, so one variable can hold it)."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


def mig_layout(text: str) -> str:
    """``GPU=PROFILE[:COUNT][+…][,GPU=…]``: the fake GPUs in MIG mode (:mod:`.gpu.miglayout`),
    checked here so that a mistake is the option's error."""
    try:
        parse_layout(text)
    except LayoutError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def build_parser() -> EnvArgumentParser:
    parser = EnvArgumentParser(
        prog="governor exporter", env_prefix=ENV_PREFIX,
        description="Prometheus exporter for NVIDIA GPUs: NVML readings and Hopper GPM profiling "
                    "ratios, sampled by a background thread and served from the latest snapshot.",
    )
    defaults = ExporterConfig()  # every option's default is the configuration's own
    parser.add_argument("--host", default=defaults.host, help="listen address")
    parser.add_argument("--port", type=port_number, default=defaults.port, help="listen port")
    parser.add_argument("--interval", type=parse_duration_seconds,
                        default=defaults.interval_seconds,
                        help="sampling interval (1s, 500ms, …; at least 100ms for GPM)")
    parser.add_argument("--slow-interval", type=parse_duration_seconds,
                        default=defaults.slow_interval_seconds,
                        help="interval for slow readings: energy, PCIe counters, remapped rows, "
                             "BAR1, power limit, GPM breakdowns, MIG topology")
    parser.add_argument("--staleness", type=parse_duration_seconds,
                        default=defaults.staleness_seconds,
                        help="withhold readings older than this "
                             "(default: 5 intervals, at least 5s)")
    parser.add_argument("--fake-gpus", type=non_negative_int, default=defaults.fake_gpus,
                        metavar="N",
                        help="serve N simulated GPUs instead of the real ones (demos, tests)")
    parser.add_argument("--fake-mig", type=mig_layout, default="",
                        metavar="GPU=PROFILE[:N][+…][,…]",
                        help="with --fake-gpus: run these fake GPUs in MIG mode, split into "
                             "these H200 MIG profiles (e.g. 1=3g.71gb+1g.18gb:2); what runs on "
                             "such a GPU runs on its first MIG device")
    parser.add_argument("--follow", default=",".join(defaults.follow), metavar="URL[,URL]",
                        help="with --fake-gpus: read GET URL/sim/device of governor serve --engine "
                             "sim every interval and show its simulated engine's load and faults "
                             "on the fake GPU it runs on (the others stay idle)")
    parser.add_argument("--names", choices=NAMES, default=defaults.names,
                        help="with --fake-gpus: serve Governor's gpu_* series, or the same GPUs "
                             "under dcgm-exporter 4.8's DCGM_FI_* names and labels (for specs "
                             "whose targets.gpu.source is dcgm)")
    parser.add_argument("--gpm", type=_flag, default=defaults.gpm, metavar="BOOL",
                        help="read Hopper GPM profiling metrics (SM/tensor/DRAM activity)")
    parser.add_argument("--xid", type=_flag, default=defaults.xid, metavar="BOOL",
                        help="watch XID error events")
    parser.add_argument("--processes", type=_flag, default=defaults.processes, metavar="BOOL",
                        help="export per-process GPU memory")
    add_logging_options(parser, level=defaults.log_level)
    return parser


def parse_config(argv: Sequence[str]) -> ExporterConfig:
    """Options → validated config; any error exits through the parser (status 2, usage line)."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    try:
        return ExporterConfig(
            host=args.host, port=args.port, interval_seconds=args.interval,
            slow_interval_seconds=args.slow_interval, staleness_seconds=args.staleness,
            fake_gpus=args.fake_gpus, fake_mig=tuple(sorted(parse_layout(args.fake_mig).items())),
            follow=url_list(args.follow), names=args.names,
            gpm=args.gpm, xid=args.xid, processes=args.processes,
            log_level=args.log_level, log_format=args.log_format,
        )
    except ConfigError as exc:
        parser.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse's way out: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    setup_logging(config.log_level, fmt=config.log_format)
    # The sampler thread holds the GIL between NVML calls; hand it to the event loop after 1 ms
    # rather than the default 5 ms, so a scrape arriving during a round is not kept waiting.
    sys.setswitchinterval(0.001)
    app = create_app(config)
    # Everything imported so far lives as long as the process: a full collection need not walk
    # those 40k objects (15 ms on a small VM) in the middle of a scrape.
    gc.freeze()
    log.info("serving http://%s:%d/metrics (%s, interval %gs)", config.host, config.port,
             _source(config), config.interval_seconds)
    try:
        web.run_app(app, host=config.host, port=config.port, access_log=None, print=None)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.host, config.port, exc.strerror or exc)
        return 1
    return 0


def _source(config: ExporterConfig) -> str:
    if not config.fake_gpus:
        return "NVML"
    following = f", following {', '.join(config.follow)}" if config.follow else ""
    mig = f", MIG on GPU(s) {', '.join(str(g) for g, _ in config.fake_mig)}" \
        if config.fake_mig else ""
    return f"{config.fake_gpus} simulated GPU(s){mig}{following}, {config.names} names"
