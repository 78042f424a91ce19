"""``governor controller``: the SLO controller (``POST /alerts``, ``GET /status``, ``/metrics``).

Every option also reads a ``GOVERNOR_…`` variable. Tokens never travel as option values (they
would show in ``ps`` and ``--help``): give a file, or the variable named in the help.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from governor.common.cli import (
    EnvArgumentParser,
    env_name,
    field_default,
    parse_duration_seconds,
    positive_int,
)
from governor.common.logs import add_logging_options, setup_logging
from governor.common.secrets import Secret, TokenError, read_token
from governor.contracts.metrics.latency import HISTOGRAM_BUCKETS
from governor.contracts.tokens import (
    ADMIN_TOKEN_ENV,
    ADMIN_TOKEN_FILE_ENV,
    GRAFANA_TOKEN_ENV,
    GRAFANA_TOKEN_FILE_ENV,
    WEBHOOK_TOKEN_ENV,
    WEBHOOK_TOKEN_FILE_ENV,
)
from governor.controller.actuators import actuator_names
from governor.controller.app import Secrets, create_app
from governor.controller.config import ControllerConfig, without_credentials
from governor.controller.law.tuning import LawConfig, LawConfigError
from governor.controller.model import Target
from governor.controller.queries import QuerySet
from governor.controller.slo import ObjectiveError, objectives
from governor.controller.start_limits import StartLimits, StartLimitsError
from governor.slo.spec import SpecError, load_spec

log = logging.getLogger("controller")

# Names of the variables that hold tokens (not tokens).
ENV_WEBHOOK_TOKEN = WEBHOOK_TOKEN_ENV
ENV_ADMIN_TOKEN = ADMIN_TOKEN_ENV
ENV_GRAFANA_TOKEN = GRAFANA_TOKEN_ENV


class UsageError(Exception):
    """A mistake in the options or the files they name; printed without a traceback."""


def parse_targets(text: str) -> tuple[Target, ...]:
    """``"http://a:8000,http://b:8000"`` → targets named ``host:port``, as Prometheus names them."""
    targets = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None:
            raise argparse.ArgumentTypeError(
                f"target {item!r}: expected http(s)://host:port, as Prometheus scrapes it")
        if parts.path not in ("", "/") or parts.query or parts.username:
            raise argparse.ArgumentTypeError(f"target {item!r}: no path, query or credentials")
        targets.append(Target(parts.netloc, f"{parts.scheme}://{parts.netloc}"))
    return tuple(targets)


def _pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {text!r}: {exc}") from None


def _default(name: str) -> Any:
    return field_default(ControllerConfig, name)


def build_parser(env: Mapping[str, str] | None = None) -> EnvArgumentParser:
    # Every default is read from the configuration the option fills, never typed twice.
    law = LawConfig()
    p = EnvArgumentParser(prog="governor controller", env_prefix="GOVERNOR_CONTROLLER_",
                          legacy_prefix="GOVERNOR_", env=env, description=__doc__,
                          epilog=f"tokens: {ENV_WEBHOOK_TOKEN} (webhook), {ENV_ADMIN_TOKEN} "
                          f"(admin API of the targets), {ENV_GRAFANA_TOKEN} (Grafana), or the "
                          "--…-token-file options")
    p.add_argument("--host", default=_default("host"), help="listen address")
    p.add_argument("--port", type=positive_int, default=_default("port"), help="listen port")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    p.add_argument("--itl-slo", default=None,
                   help="the decode SLO's name (default: the spec's controller-linked SLO)")
    p.add_argument("--ttft-slo", default=None,
                   help="the time-to-first-token SLO the law weighs (default: the spec's SLO "
                        "with `role: ttft`; '' for none)")
    p.add_argument("--prometheus", default=_default("prometheus_url"),
                   help="Prometheus base URL")
    p.add_argument("--targets", type=parse_targets, default=(),
                   help="inference services to manage, comma-separated http://host:port")
    p.add_argument("--discover", type=_pattern, nargs="?", const=".*", default=None,
                   metavar="REGEX",
                   help="also manage the instances Prometheus scrapes in --job whose instance "
                        "label matches REGEX in full (default: all of them); they receive the "
                        "admin token, so without this only --targets do")
    p.add_argument("--static-only", action="store_true",
                   help="(the default now; kept for old command lines) manage only --targets")
    p.add_argument("--job", default=None,
                   help="Prometheus job of the inference service (default: targets.inference.job "
                        "of the spec, 'inference' without one)")
    p.add_argument("--instance-scheme", choices=("http", "https"),
                   default=_default("instance_scheme"),
                   help="scheme for instances discovered from Prometheus")
    p.add_argument("--ca-file", type=Path, default=None,
                   help="CA bundle that signs the targets' and Prometheus's certificates")
    p.add_argument("--insecure-skip-verify", action="store_true",
                   help="do not verify TLS certificates (tests only: the admin token can leak)")
    p.add_argument("--max-targets", type=positive_int, default=_default("max_targets"),
                   help="manage at most this many targets")
    p.add_argument("--resync", type=parse_duration_seconds, default=_default("resync_seconds"),
                   help="reconcile this often even without alerts")
    p.add_argument("--target-deadline", type=parse_duration_seconds,
                   default=_default("target_deadline_seconds"),
                   help="the most one target may take of a pass (read, decide, apply); a "
                        "slower one is retried later with backoff")
    p.add_argument("--scrape-interval", type=parse_duration_seconds,
                   default=law.scrape_interval_seconds,
                   help="Prometheus's scrape interval for the inference job")
    p.add_argument("--short-window", type=parse_duration_seconds,
                   default=law.observation_window_seconds,
                   help="window of the latency tails the law acts on")
    p.add_argument("--long-window", type=parse_duration_seconds,
                   default=float(field_default(QuerySet, "long_window_seconds")),
                   help="window that confirms margin before relaxing")
    p.add_argument("--cooldown", type=parse_duration_seconds, default=law.cooldown_seconds,
                   help="at most one change per target per cooldown (> short window + scrape)")
    p.add_argument("--stabilisation", type=parse_duration_seconds,
                   default=law.stabilisation_seconds,
                   help="relax only after this long without a breach")
    p.add_argument("--at-risk-share", type=float, default=law.at_risk_share,
                   help="cut before the ITL quantile breaches once spikes over the SLO take "
                        "this share of its allowance (1: only on a breach, no early cut)")
    p.add_argument("--prefill-seconds-per-token", type=float,
                   default=law.prefill_seconds_per_token_prior,
                   help="least step time per prefill token the law plans with; it learns "
                        "upward (default: Llama-3-8B on an H200)")
    p.add_argument("--alert-expiry", type=parse_duration_seconds,
                   default=_default("alert_expiry_seconds"),
                   help="forget an alert Alertmanager has not re-sent for this long (at least "
                        "twice the controller route's repeat interval)")
    p.add_argument("--state-file", type=Path, default=Path(".run/controller/state.json"),
                   help="where per-target state persists across restarts")
    p.add_argument("--audit-log", type=Path, default=Path(".run/controller/audit.jsonl"),
                   help="JSON-lines audit trail of decisions")
    p.add_argument("--dry-run", action="store_true", help="decide and log, never apply")
    p.add_argument("--start-limits", default=None, metavar="FILE|TOKENS,SEQS",
                   help="at a target's first pass without state, set these limits (within its "
                        "floor and ceiling) instead of keeping vLLM's defaults: the file "
                        "`governor recommend --json` writes, or max_num_batched_tokens,"
                        "max_num_seqs; the law runs as usual after")
    p.add_argument("--actuator", choices=actuator_names(), default=_default("actuator"),
                   help="how limits are read and moved on the targets: admin-api (GET/PUT "
                        "/admin/batching), or another installed actuator by name")
    p.add_argument("--grafana-url", default=None, help="annotate changes on this Grafana")
    p.add_argument("--grafana-token-file", type=Path, default=None, env=GRAFANA_TOKEN_FILE_ENV,
                   old_env=(env_name("--grafana-token-file", p.env_prefix),),
                   help=f"Grafana service-account token (or {ENV_GRAFANA_TOKEN})")
    p.add_argument("--webhook-token-file", type=Path, default=None, env=WEBHOOK_TOKEN_FILE_ENV,
                   old_env=(env_name("--webhook-token-file", p.env_prefix),),
                   help=f"bearer token Alertmanager must send (or {ENV_WEBHOOK_TOKEN})")
    p.add_argument("--allow-unauthenticated-webhook", action="store_true",
                   help="accept alerts without a bearer token (demos only)")
    p.add_argument("--admin-token-file", type=Path, default=None, env=ADMIN_TOKEN_FILE_ENV,
                   old_env=(env_name("--admin-token-file", p.env_prefix),),
                   help=f"bearer token for the targets' admin API (or {ENV_ADMIN_TOKEN})")
    add_logging_options(p)
    return p


def _secret(path: Path | None, variable: str, env: Mapping[str, str]) -> Secret | None:
    try:
        return read_token(path, variable, env)
    except TokenError as exc:
        raise UsageError(str(exc)) from None


def build_config(args: argparse.Namespace) -> ControllerConfig:
    try:
        # Checked as `governor generate` checks it, so the two agree on what a valid spec is.
        spec = load_spec(args.slo, histograms=HISTOGRAM_BUCKETS)
        found = objectives(spec, itl_slo=args.itl_slo, ttft_slo=args.ttft_slo,
                           short_window_seconds=round(args.short_window),
                           long_window_seconds=round(args.long_window))
        law = LawConfig(observation_window_seconds=args.short_window,
                        long_window_seconds=args.long_window,
                        scrape_interval_seconds=args.scrape_interval,
                        cooldown_seconds=args.cooldown, stabilisation_seconds=args.stabilisation,
                        prefill_seconds_per_token_prior=args.prefill_seconds_per_token,
                        at_risk_share=args.at_risk_share)
    except (SpecError, ObjectiveError, LawConfigError) as exc:
        raise UsageError(str(exc)) from None
    if args.static_only and args.discover is not None:
        raise UsageError("--static-only and --discover contradict each other")
    if args.ca_file is not None and not args.ca_file.is_file():
        raise UsageError(f"--ca-file {args.ca_file}: no such file")
    if args.ca_file is not None and args.insecure_skip_verify:
        raise UsageError("--ca-file and --insecure-skip-verify contradict each other")
    try:
        start = None if args.start_limits is None else StartLimits.parse(args.start_limits)
    except StartLimitsError as exc:
        raise UsageError(str(exc)) from None
    queries = found.queries
    if args.job is not None:
        queries = replace(queries, target=replace(queries.target, job=args.job))
    return ControllerConfig(
        slo=found.slo, queries=queries, law=law, prometheus_url=args.prometheus,
        static_targets=args.targets, discover=args.discover,
        instance_scheme=args.instance_scheme, ca_file=args.ca_file,
        insecure_skip_verify=args.insecure_skip_verify, max_targets=args.max_targets,
        resync_seconds=args.resync, alert_expiry_seconds=args.alert_expiry,
        target_deadline_seconds=args.target_deadline,
        dry_run=args.dry_run, start_limits=start, actuator=args.actuator,
        state_path=args.state_file,
        audit_path=args.audit_log,
        grafana_url=args.grafana_url, host=args.host, port=args.port,
    )


def guarded(config: ControllerConfig) -> list[tuple[int, str]]:
    """What the controller will guard, said once at start (with its log level): a spec without
    a first-token SLO gets no first-token guard, and the operator is told so."""
    slo, queries = config.slo, config.queries
    itl = (f"inter-token latency: SLO {queries.itl_slo!r}, p{slo.itl_quantile * 100:g} "
           f"<= {slo.itl_seconds * 1000:g} ms")
    if slo.ttft_seconds is None:
        return [(logging.INFO, f"guarding {itl}"), (logging.WARNING, (
            "no time-to-first-token SLO (none has `role: ttft`, nor was one named with "
            "--ttft-slo): the controller will not guard time to first token: a budget cut may "
            "leave prefill slower than prompts arrive, no cut that makes first tokens late is "
            "given back, and no first-token breach raises the budget"))]
    ttft = (f"time to first token: SLO {queries.ttft_slo!r}, p{slo.ttft_quantile * 100:g} "
            f"<= {slo.ttft_seconds * 1000:g} ms")
    return [(logging.INFO, f"guarding {itl}; weighing {ttft}")]


def build_secrets(args: argparse.Namespace, env: Mapping[str, str]) -> Secrets:
    webhook = _secret(args.webhook_token_file, ENV_WEBHOOK_TOKEN, env)
    if webhook is None and not args.allow_unauthenticated_webhook:
        raise UsageError(f"the webhook needs a bearer token: --webhook-token-file or "
                         f"{ENV_WEBHOOK_TOKEN} (or --allow-unauthenticated-webhook for a demo)")
    return Secrets(webhook=webhook, admin=_secret(args.admin_token_file, ENV_ADMIN_TOKEN, env),
                   grafana=_secret(args.grafana_token_file, ENV_GRAFANA_TOKEN, env))


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    args = build_parser(env).parse_args(argv)
    setup_logging(args.log_level, fmt=args.log_format)
    try:
        config = build_config(args)
        secrets = build_secrets(args, env)
    except UsageError as exc:
        print(f"governor controller: error: {exc}", file=sys.stderr)
        return 2
    if secrets.admin is None:
        log.warning("no admin token (%s): targets that require one will answer 401",
                    ENV_ADMIN_TOKEN)
    if not config.static_targets and config.discover is None:
        log.warning("no targets: name them with --targets, or let --discover manage the "
                    "instances Prometheus scrapes; until then nothing is retuned")
    if config.insecure_skip_verify:
        log.warning("--insecure-skip-verify: TLS certificates are not checked, so the admin "
                    "token goes to whoever answers")
    for level, line in guarded(config):
        log.log(level, "%s", line)
    if config.start_limits is not None:
        start = config.start_limits
        log.info("a target without state starts at max_num_batched_tokens %d, max_num_seqs %d "
                 "(within its floor and ceiling), from %s", start.limits.max_num_batched_tokens,
                 start.limits.max_num_seqs, start.source)
    log.info("controller on %s:%d, prometheus %s, %s", config.host, config.port,
             without_credentials(config.prometheus_url),
             "dry run" if config.dry_run else "applying changes")
    web.run_app(create_app(config, secrets), host=config.host, port=config.port, print=None)
    return 0
