"""The synthetic probe's row of the inference board: what ``governor probe`` saw of each target,
read from the probe's own job (its requests are in none of the service's series).

Quiet hours show here: with no traffic the latency rows above are empty, while the probe still
sends a few tokens to every replica on its interval.
"""

from __future__ import annotations

from governor.contracts.endpoints import JOB_PROBE
from governor.contracts.metrics import probe as p
from governor.contracts.promql import Matcher, Selector, eq, histogram_quantile, ratio_of_rates
from governor.dashboards.board import Board
from governor.dashboards.panels import Query, Spec, timeseries
from governor.dashboards.variables import RATE_INTERVAL, ref

SCOPE: tuple[Matcher, ...] = (eq("job", JOB_PROBE),)
BY = (p.LABEL_TARGET, p.LABEL_URL)
LEGEND = f"{ref(p.LABEL_TARGET)} {ref(p.LABEL_URL)}"
SUCCESS = eq(p.LABEL_RESULT, p.RESULT_SUCCESS)


def probe_row(board: Board) -> None:
    board.row("Synthetic probe")
    about = ("governor probe's own requests (a few tokens, each replica once per interval), "
             "by target and replica; the service leaves them out of its own series.")
    board.panel(timeseries(
        Spec("Probe success ratio", f"Share of probe requests answered in full. {about}",
             "percentunit", width=8),
        [Query(ratio_of_rates(Selector(p.REQUESTS.total, (*SCOPE, SUCCESS)),
                              Selector(p.REQUESTS.total, SCOPE), RATE_INTERVAL, BY), LEGEND)]))
    for metric, title in ((p.TIME_TO_FIRST_TOKEN, "Probe time to first token (p90)"),
                          (p.INTER_TOKEN_LATENCY, "Probe inter-token latency (p90)")):
        board.panel(timeseries(
            Spec(title, f"{metric.help} {about}", "s", width=8),
            [Query(histogram_quantile(0.9, metric.name, SCOPE, RATE_INTERVAL, BY), LEGEND)]))
