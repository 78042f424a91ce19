"""``governor generate``: slo.yaml → rules, promtool tests, alertmanager.yml, prometheus.yml.

    governor generate --slo slo.yaml --out deploy          # what compose mounts
    governor generate --check                              # exit 1 if deploy/ is stale
    governor generate --local --out /tmp/stack             # localhost targets, for `governor up`
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from governor.alerts.catalog import load_checked_spec
from governor.alerts.params import Endpoints, RenderParams
from governor.alerts.render import differences, render_all, write_all
from governor.alerts.spec import SpecError
from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.contracts.promql import format_duration


def _seconds(text: str) -> int:
    seconds = parse_duration_seconds(text)
    if seconds != int(seconds):
        raise argparse.ArgumentTypeError(f"whole seconds only: {text!r}")
    return int(seconds)


def _addresses(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def build_parser() -> EnvArgumentParser:
    parser = EnvArgumentParser(
        prog="governor generate",
        description="Write Prometheus rules and their promtool tests, alertmanager.yml, "
                    "prometheus.yml and a PrometheusRule from the SLO spec.",
    )
    defaults, endpoints = RenderParams(), Endpoints()
    parser.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    parser.add_argument("--out", type=Path, default=Path("deploy"), help="output directory")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the files under --out are stale")
    parser.add_argument("--local", action="store_true",
                        help="target 127.0.0.1 at the default ports instead of compose hostnames")
    for name in ("inference", "exporter", "controller", "alertmanager"):
        parser.add_argument(f"--{name}-targets", type=_addresses, dest=name, metavar="ADDRS",
                            default=",".join(getattr(endpoints, name)),
                            help=f"comma-separated host:port of the {name} target(s)")
    timing = {
        "scrape-interval": "scrape_interval_seconds",
        "evaluation-interval": "evaluation_interval_seconds",
        "fast-window": "fast_window_seconds",
        "fast-for": "fast_for_seconds",
        "group-wait": "group_wait_seconds",
        "control-group-wait": "control_group_wait_seconds",
        "control-group-interval": "control_group_interval_seconds",
        "control-repeat-interval": "control_repeat_interval_seconds",
    }
    for option, attribute in timing.items():
        parser.add_argument(f"--{option}", type=_seconds, dest=attribute, metavar="DURATION",
                            default=format_duration(getattr(defaults, attribute)),
                            help="a duration (15s, 1m)")
    parser.add_argument("--controller-token-file", default=defaults.controller_token_file,
                        metavar="PATH",
                        help="where Alertmanager reads the controller's bearer token")
    return parser


def _config(args: argparse.Namespace) -> tuple[Endpoints, RenderParams]:
    endpoints = Endpoints.local() if args.local else Endpoints(
        args.inference, args.exporter, args.controller, args.alertmanager)
    params = RenderParams(
        scrape_interval_seconds=args.scrape_interval_seconds,
        evaluation_interval_seconds=args.evaluation_interval_seconds,
        fast_window_seconds=args.fast_window_seconds,
        fast_for_seconds=args.fast_for_seconds,
        group_wait_seconds=args.group_wait_seconds,
        control_group_wait_seconds=args.control_group_wait_seconds,
        control_group_interval_seconds=args.control_group_interval_seconds,
        control_repeat_interval_seconds=args.control_repeat_interval_seconds,
        controller_token_file=args.controller_token_file,
    )
    return endpoints, params


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        endpoints, params = _config(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        spec = load_checked_spec(args.slo)
    except SpecError as exc:
        print(f"governor generate: {exc}", file=sys.stderr)
        return 2
    files = render_all(spec, endpoints, params, source=args.slo.name)
    out: Path = args.out
    if args.check:
        stale = differences(files, out)
        for relative in stale:
            print(f"stale: {out / relative}", file=sys.stderr)
        if stale:
            print(f"governor generate: {len(stale)} file(s) under {out} differ from {args.slo}; "
                  f"run: governor generate --slo {args.slo} --out {out}", file=sys.stderr)
        return 1 if stale else 0
    try:
        changed = write_all(files, out)
    except OSError as exc:
        print(f"governor generate: cannot write under {out}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    for path in changed:
        print(f"{'removed' if not path.exists() else 'wrote'} {path}")
    print(f"{len(files)} files under {out}, {len(changed)} changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
