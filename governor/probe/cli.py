"""``governor probe``: the synthetic probe, ``/metrics`` on port 9600 (127.0.0.1 by default).

It reads the targets, interval, timeout and request size from ``slo.yaml``'s ``probe`` section
(the stack's own inference service every 15 s without one). Every option also reads a
``GOVERNOR_PROBE_…`` variable; the command line wins. A mistake in either, or in the spec, is a
one-line error and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from aiohttp import web

from governor.common.cli import EnvArgumentParser, port_number
from governor.common.logs import add_logging_options, setup_logging
from governor.common.secrets import TokenError, read_token
from governor.contracts.endpoints import LOCAL_HOST, PROBE
from governor.contracts.tokens import PROBE_TOKEN_ENV, PROBE_TOKEN_FILE_ENV
from governor.probe.app import create_app
from governor.probe.config import ConfigError, ProbeConfig, relocate
from governor.slo.spec import SpecError, load_spec

log = logging.getLogger("probe")

ENV_PREFIX = "GOVERNOR_PROBE_"
MAX_TARGET_OPTIONS = 16


def target_option(text: str) -> tuple[str, tuple[str, ...]]:
    """``NAME=URL[,URL]`` → the name and its URLs (checked against the spec later)."""
    name, sep, urls = text.partition("=")
    parts = tuple(part.strip() for part in urls.split(",") if part.strip())
    if not sep or not name.strip() or not parts:
        raise argparse.ArgumentTypeError(f"expected NAME=URL[,URL]: got {text[:80]!r}")
    return name.strip(), parts


def build_parser(env: Mapping[str, str] | None = None) -> EnvArgumentParser:
    parser = EnvArgumentParser(
        prog="governor probe", env_prefix=ENV_PREFIX, env=env,
        description="Synthetic probe: a small streaming request to each target slo.yaml's probe "
                    "section names, on an interval, its time to first token, inter-token "
                    "latency and success exported on /metrics. Its requests carry the probe "
                    "token in X-Governor-Probe, which governor serve checks to leave them out "
                    "of its own series.")
    parser.add_argument("--slo", type=Path, default=Path("slo.yaml"),
                        help="the SLO spec whose probe section names the targets")
    parser.add_argument("--target", type=target_option, action="append", default=[],
                        metavar="NAME=URL[,URL]",
                        help="where a target the spec names is reached from here (repeat for "
                             "each); it cannot add a target")
    parser.add_argument("--probe-token-file", type=Path, default=None, env=PROBE_TOKEN_FILE_ENV,
                        help="file holding the probe token governor serve checks (or set "
                             f"{PROBE_TOKEN_ENV}); without one the requests carry no mark and "
                             "count in the targets' SLIs")
    parser.add_argument("--host", default=LOCAL_HOST, help="listen address of /metrics")
    parser.add_argument("--port", type=port_number, default=PROBE.port, help="listen port")
    add_logging_options(parser)
    return parser


def parse_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ProbeConfig:
    """Options, the environment and the spec → validated config; any error exits through the
    parser (status 2)."""
    env = os.environ if env is None else env
    parser = build_parser(env)
    args = parser.parse_args(list(argv))
    if len(args.target) > MAX_TARGET_OPTIONS:
        parser.error(f"--target given {len(args.target)} times: at most {MAX_TARGET_OPTIONS}")
    names = [name for name, _ in args.target]
    if len(set(names)) != len(names):
        parser.error("--target names a target twice: give its URLs once, comma-separated")
    try:
        spec = load_spec(args.slo)
        settings = relocate(spec.probe, dict(args.target))
        token = read_token(args.probe_token_file, PROBE_TOKEN_ENV, env)
    except SpecError as exc:
        parser.error(f"{args.slo} is invalid:\n  " + "\n  ".join(exc.errors))
    except (ConfigError, TokenError) as exc:
        parser.error(str(exc))
    return ProbeConfig(settings, args.host, args.port, args.log_level, args.log_format, token)


def main(argv: list[str] | None = None) -> int:
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # argparse's way out: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    setup_logging(config.log_level, fmt=config.log_format)
    settings = config.settings
    if config.token is None:
        log.warning("no probe token (%s): the requests carry no mark, and count in the targets' "
                    "own SLIs", PROBE_TOKEN_FILE_ENV)
    log.info("probing %s every %gs (timeout %gs); serving http://%s:%d/metrics",
             ", ".join(f"{r.target} {r.url}" for r in config.replicas()),
             settings.interval_seconds, settings.timeout_seconds, config.host, config.port)
    try:
        web.run_app(create_app(config), host=config.host, port=config.port, access_log=None,
                    print=None)
    except OSError as exc:
        log.error("cannot listen on %s:%d: %s", config.host, config.port, exc.strerror or exc)
        return 1
    return 0
