"""``governor generate``: everything derived from slo.yaml, into one ``--out`` directory.

One pass: the spec is loaded once, the rules side (rules, their promtool tests,
alertmanager.yml, prometheus.yml, a PrometheusRule) and the Grafana side (boards and
provisioning) render into one map of files, and one call writes or checks it against one table
of owned folders, so a stale generated file goes wherever it is and a hand-made one stays.

    governor generate --slo slo.yaml --out deploy          # what compose mounts
    governor generate --check                              # exit 1 if deploy/ is stale
    governor generate --local --out /tmp/stack             # localhost targets, for `governor up`
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from governor.alerts import render as rules
from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.contracts.promql import format_duration
from governor.dashboards import render as boards
from governor.dashboards.provisioning import GrafanaParams
from governor.manifests import render as manifests
from governor.render.artifacts import Artifacts
from governor.render.catalog import load_checked_spec
from governor.render.params import Endpoints, RenderParams
from governor.slo.spec import SloSpec, SpecError

PROG: Final = "governor generate"
DESCRIPTION: Final = (
    "Write everything derived from the SLO spec: Prometheus rules and their promtool tests, "
    "alertmanager.yml, prometheus.yml, Grafana dashboards with their provisioning, and "
    "Kubernetes manifests (the components, their monitors, a PrometheusRule, an "
    "AlertmanagerConfig).")
SPEC_ERROR: Final = 2
# Every folder whose generated files a run may delete: the rules side's, Grafana's, Kubernetes'.
ARTIFACTS: Final[Artifacts] = rules.ARTIFACTS + boards.ARTIFACTS + manifests.ARTIFACTS
# Options setting a RenderParams interval: option → attribute.
TIMING: Final = {
    "scrape-interval": "scrape_interval_seconds",
    "evaluation-interval": "evaluation_interval_seconds",
    "fast-window": "fast_window_seconds",
    "fast-for": "fast_for_seconds",
    "group-wait": "group_wait_seconds",
    "control-group-wait": "control_group_wait_seconds",
    "control-group-interval": "control_group_interval_seconds",
    "control-repeat-interval": "control_repeat_interval_seconds",
}


@dataclass(frozen=True)
class Settings:
    """Everything besides the spec that the files depend on."""

    endpoints: Endpoints
    params: RenderParams
    grafana: GrafanaParams


def _seconds(text: str) -> int:
    seconds = parse_duration_seconds(text)
    if seconds != int(seconds):
        raise argparse.ArgumentTypeError(f"whole seconds only: {text!r}")
    return int(seconds)


def _addresses(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def build_parser() -> EnvArgumentParser:
    parser = EnvArgumentParser(prog=PROG, description=DESCRIPTION)
    defaults, endpoints = RenderParams(), Endpoints()
    parser.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    parser.add_argument("--out", type=Path, default=Path("deploy"), help="output directory")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the files under --out are stale")
    parser.add_argument("--local", action="store_true",
                        help="target 127.0.0.1 at the default ports instead of compose hostnames "
                             "(scrape targets, Alertmanager, Grafana's datasources)")
    for name in ("inference", "exporter", "controller", "alertmanager"):
        parser.add_argument(f"--{name}-targets", type=_addresses, dest=name, metavar="ADDRS",
                            default=",".join(getattr(endpoints, name)),
                            help=f"comma-separated host:port of the {name} target(s)")
    for option, attribute in TIMING.items():
        parser.add_argument(f"--{option}", type=_seconds, dest=attribute, metavar="DURATION",
                            default=format_duration(getattr(defaults, attribute)),
                            help="a duration (15s, 1m)")
    parser.add_argument("--controller-token-file", default=defaults.controller_token_file,
                        metavar="PATH",
                        help="where Alertmanager reads the controller's bearer token")
    return parser


def settings(args: argparse.Namespace) -> Settings:
    """Raises ValueError for values each option accepts alone but not together."""
    endpoints = Endpoints.local() if args.local else Endpoints(
        args.inference, args.exporter, args.controller, args.alertmanager)
    params = RenderParams(controller_token_file=args.controller_token_file,
                          **{attribute: getattr(args, attribute) for attribute in TIMING.values()})
    scrape = params.scrape_interval_seconds
    grafana = GrafanaParams.local(scrape) if args.local else GrafanaParams(
        scrape_interval_seconds=scrape)
    return Settings(endpoints, params, grafana)


def render_all(spec: SloSpec, settings: Settings, *, source: str) -> dict[str, str]:
    """Every file: relative path → text, the rules side's, Grafana's and the Kubernetes
    manifests, by path."""
    files = {**rules.render_all(spec, settings.endpoints, settings.params, source=source),
             **boards.render_all(spec, settings.grafana, source=source),
             **manifests.render_all(spec, settings.params, source=source)}
    return dict(sorted(files.items()))


def check(files: Mapping[str, str], out: Path, slo: Path) -> int:
    stale = ARTIFACTS.differences(files, out)
    for relative in stale:
        print(f"stale: {out / relative}", file=sys.stderr)
    if stale:
        print(f"{PROG}: {len(stale)} file(s) under {out} differ from {slo}; "
              f"run: {PROG} --slo {slo} --out {out}", file=sys.stderr)
    return 1 if stale else 0


def write(files: Mapping[str, str], out: Path) -> int:
    try:
        changed = ARTIFACTS.write_all(files, out)
    except OSError as exc:
        print(f"{PROG}: cannot write under {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for path in changed:
        print(f"{'removed' if not path.exists() else 'wrote'} {path}")
    print(f"{len(files)} files under {out}, {len(changed)} changed")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        chosen = settings(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        spec = load_checked_spec(args.slo)
    except SpecError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return SPEC_ERROR
    files = render_all(spec, chosen, source=args.slo.name)
    return check(files, args.out, args.slo) if args.check else write(files, args.out)


if __name__ == "__main__":
    sys.exit(main())
