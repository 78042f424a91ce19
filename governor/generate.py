"""``governor generate``: everything derived from slo.yaml, into one ``--out`` directory.

The alerts generator writes the rules, their promtool tests, alertmanager.yml and
prometheus.yml; the dashboards generator then writes Grafana's boards and provisioning, with the
same options. The two live apart because the layers run governor > dashboards > alerts:
``alerts`` may not import ``dashboards``, so this module joins them (``python -m governor.alerts``
still writes the alerts side alone).

    governor generate --slo slo.yaml --out deploy
    governor generate --check        # exit 1 if anything under deploy/ is stale
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from governor.alerts import cli as alerts_cli
from governor.alerts.catalog import load_checked_spec
from governor.common.cli import EnvArgumentParser
from governor.dashboards import cli as dashboards_cli
from governor.slo.spec import SpecError

DESCRIPTION = ("Write everything derived from the SLO spec: Prometheus rules and their promtool "
               "tests, alertmanager.yml, prometheus.yml, a PrometheusRule, and Grafana "
               "dashboards with their provisioning.")
SPEC_ERROR = 2


def build_parser() -> EnvArgumentParser:
    parser = alerts_cli.build_parser()
    parser.description = DESCRIPTION
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(arguments)
    status = alerts_cli.main(arguments)
    if status == SPEC_ERROR:
        return status  # the alerts generator has printed every problem of the spec
    try:
        spec = load_checked_spec(args.slo)
    except SpecError as exc:  # the file changed between the two reads
        print(f"governor generate: {exc}", file=sys.stderr)
        return SPEC_ERROR
    grafana = dashboards_cli.generate(spec, args.slo.name, args.out,
                                      dashboards_cli.grafana_params(args), check=args.check)
    return max(status, grafana)


if __name__ == "__main__":
    sys.exit(main())
