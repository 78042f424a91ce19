"""``python -m governor.dashboards``: slo.yaml → Grafana dashboards and provisioning under
``--out``.

    python -m governor.dashboards --slo slo.yaml --out deploy     # deploy/grafana/…
    python -m governor.dashboards --check                         # exit 1 if deploy/grafana is
    stale

``governor generate`` runs this after the alerts generator, with the same options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from governor.alerts.catalog import load_checked_spec
from governor.alerts.params import RenderParams
from governor.alerts.spec import SloSpec, SpecError
from governor.common.cli import EnvArgumentParser, parse_duration_seconds
from governor.contracts.promql import format_duration
from governor.dashboards.provisioning import GrafanaParams
from governor.dashboards.render import differences, render_all, write_all

PROG = "governor generate"


def _seconds(text: str) -> int:
    seconds = parse_duration_seconds(text)
    if seconds != int(seconds):
        raise argparse.ArgumentTypeError(f"whole seconds only: {text!r}")
    return int(seconds)


def build_parser() -> EnvArgumentParser:
    parser = EnvArgumentParser(
        prog="python -m governor.dashboards",
        description="Write Grafana dashboards (SLO overview, inference, GPU, controller) and "
                    "their provisioning from the SLO spec.")
    parser.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    parser.add_argument("--out", type=Path, default=Path("deploy"), help="output directory")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if the files under --out are stale")
    parser.add_argument("--local", action="store_true",
                        help="datasources on 127.0.0.1 instead of compose hostnames")
    parser.add_argument("--scrape-interval", type=_seconds, dest="scrape_interval_seconds",
                        metavar="DURATION",
                        default=format_duration(RenderParams().scrape_interval_seconds),
                        help="Prometheus's scrape interval (Grafana's minimum step)")
    return parser


def grafana_params(args: argparse.Namespace) -> GrafanaParams:
    """The parameters from parsed options (this parser's or ``governor generate``'s)."""
    if args.local:
        return GrafanaParams.local(args.scrape_interval_seconds)
    return GrafanaParams(scrape_interval_seconds=args.scrape_interval_seconds)


def generate(spec: SloSpec, source: str, out: Path, params: GrafanaParams, *,
             check: bool) -> int:
    """Write (or with ``check``, compare) the Grafana files; prints what it did; exit status."""
    files = render_all(spec, params, source=source)
    if check:
        stale = differences(files, out)
        for relative in stale:
            print(f"stale: {out / relative}", file=sys.stderr)
        if stale:
            print(f"{PROG}: {len(stale)} Grafana file(s) under {out} differ from {source}; "
                  f"run: {PROG} --out {out}", file=sys.stderr)
        return 1 if stale else 0
    try:
        changed = write_all(files, out)
    except OSError as exc:
        print(f"{PROG}: cannot write under {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for path in changed:
        print(f"{'removed' if not path.exists() else 'wrote'} {path}")
    print(f"{len(files)} Grafana files under {out}, {len(changed)} changed")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec = load_checked_spec(args.slo)
    except SpecError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    return generate(spec, args.slo.name, args.out, grafana_params(args), check=args.check)


if __name__ == "__main__":
    sys.exit(main())
