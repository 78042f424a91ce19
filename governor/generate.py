"""``governor generate``: everything derived from slo.yaml, into one ``--out`` directory.

One pass: the spec is loaded once, the rules side (rules, their promtool tests,
alertmanager.yml, prometheus.yml, a PrometheusRule) and the Grafana side (boards and
provisioning) render into one map of files, and one call writes or checks it against one table
of owned folders, so a stale generated file goes wherever it is and a hand-made one stays.

    governor generate --slo slo.yaml --out deploy          # what compose mounts
    governor generate --compose compose.yaml               # and the compose file that mounts it
    governor generate --check --compose compose.yaml       # exit 1 if either is stale
    governor generate --local --out /tmp/stack             # localhost targets, for `governor up`
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from governor.alerts import render as rules
from governor.alerts.alertmanager import alertmanager_args
from governor.alerts.prometheus_config import prometheus_args
from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.contracts.promql import format_duration
from governor.dashboards import render as boards
from governor.dashboards.provisioning import DASHBOARDS_PATH, GrafanaParams
from governor.generation.artifacts import Artifacts
from governor.generation.catalog import load_checked_spec
from governor.generation.params import Endpoints, RenderParams
from governor.manifests import compose
from governor.manifests import render as manifests
from governor.slo.spec import SloSpec, SpecError

PROG: Final = "governor generate"
DESCRIPTION: Final = (
    "Write everything derived from the SLO spec: Prometheus rules and their promtool tests, "
    "alertmanager.yml, prometheus.yml, Grafana dashboards with their provisioning, and "
    "Kubernetes manifests (the components, their monitors, a PrometheusRule, an "
    "AlertmanagerConfig), and with --compose the compose file that runs the stack.")
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
    for name in ("inference", "exporter", "controller", "alertmanager", "probe"):
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
    parser.add_argument("--compose", type=Path, default=None, metavar="PATH",
                        help="also write the compose file here (the repository's: "
                             "compose.yaml), mounting --slo and --out relative to it")
    return parser


def settings(args: argparse.Namespace) -> Settings:
    """Raises ValueError for values each option accepts alone but not together."""
    if args.compose is not None and args.local:
        raise ValueError("--compose and --local contradict each other: the compose file's "
                         "services reach each other by their compose names")
    endpoints = Endpoints.local() if args.local else Endpoints(
        args.inference, args.exporter, args.controller, args.alertmanager, args.probe)
    params = RenderParams(controller_token_file=args.controller_token_file,
                          **{attribute: getattr(args, attribute) for attribute in TIMING.values()})
    scrape = params.scrape_interval_seconds
    grafana = GrafanaParams.local(scrape) if args.local else GrafanaParams(
        scrape_interval_seconds=scrape)
    if args.compose is not None:
        compose.check_params(params)
    return Settings(endpoints, params, grafana)


def render_all(spec: SloSpec, settings: Settings, *, source: str) -> dict[str, str]:
    """Every file: relative path → text, the rules side's, Grafana's and the Kubernetes
    manifests, by path."""
    files = {**rules.render_all(spec, settings.endpoints, settings.params, source=source),
             **boards.render_all(spec, settings.grafana, source=source),
             **manifests.render_all(spec, settings.params, source=source)}
    return dict(sorted(files.items()))


def compose_file(spec: SloSpec, settings: Settings, *, slo: Path, out: Path, path: Path,
                 source: str) -> str:
    """The compose file at ``path``: the other generators' programs, the spec and --out
    mounted relative to it."""
    programs = compose.Programs(
        prometheus=tuple(prometheus_args(
            spec, settings.params, config_file=compose.in_container(rules.PROMETHEUS_CONFIG),
            storage_path=compose.PROMETHEUS_DATA)),
        alertmanager=tuple(alertmanager_args(
            config_file=compose.in_container(rules.ALERTMANAGER_CONFIG),
            storage_path=compose.ALERTMANAGER_DATA)),
        dashboards_path=DASHBOARDS_PATH, dashboards_dir=boards.DASHBOARDS_DIR)
    layout = compose.Layout(_relative(slo, path.parent), _relative(out, path.parent))
    return compose.render(spec, settings.params, programs, layout, source=source)


def _relative(target: Path, start: Path) -> str:
    """``./deploy``, ``../slo.yaml``: a path compose resolves from the file's folder."""
    relative = Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()
    return relative if relative.startswith("../") else f"./{relative}"


def check(files: Mapping[str, str], out: Path, slo: Path,
          composed: tuple[Path, str] | None = None) -> int:
    stale = [str(out / relative) for relative in ARTIFACTS.differences(files, out)]
    if composed is not None and _differs(*composed):
        stale.append(str(composed[0]))
    for path in stale:
        print(f"stale: {path}", file=sys.stderr)
    if stale:
        also = f" --compose {composed[0]}" if composed is not None else ""
        print(f"{PROG}: {len(stale)} file(s) under {out} differ from {slo}; "
              f"run: {PROG} --slo {slo} --out {out}{also}", file=sys.stderr)
    return 1 if stale else 0


def _differs(path: Path, text: str) -> bool:
    return not path.is_file() or path.read_text(encoding="utf-8") != text


def write(files: Mapping[str, str], out: Path,
          composed: tuple[Path, str] | None = None) -> int:
    try:
        changed = ARTIFACTS.write_all(files, out)
    except OSError as exc:
        print(f"{PROG}: cannot write under {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if composed is not None and _differs(*composed):
        try:
            composed[0].write_text(composed[1], encoding="utf-8")
        except OSError as exc:
            print(f"{PROG}: cannot write {composed[0]}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        changed.append(composed[0])
    for path in changed:
        print(f"{'removed' if not path.exists() else 'wrote'} {path}")
    also = f" and {composed[0]}" if composed is not None else ""
    print(f"{len(files)} files under {out}{also}, {len(changed)} changed")
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
    composed = None if args.compose is None else (args.compose, compose_file(
        spec, chosen, slo=args.slo, out=args.out, path=args.compose, source=args.slo.name))
    if args.check:
        return check(files, args.out, args.slo, composed)
    return write(files, args.out, composed)


if __name__ == "__main__":
    sys.exit(main())
