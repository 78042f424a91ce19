"""``--admission``: the admission policies side by side, each with the batching it runs beside.

The same workload, scored as the headline runs are, behind each gate ``governor serve`` can put
in front of its engine (:mod:`governor.admission.deadline`, driven in virtual time by
:mod:`governor.bench.controller.admission`):

* none: every request reaches the engine (the headline runs (a), (b), (c));
* the best static bound in hindsight: the service refuses a request with more than a fixed number
  of prompt tokens ahead of it (``--max-tokens-ahead``), each bound of ``--bounds`` run at the
  best static batching limits found without a gate; the best of those runs and of the ungated
  static grid is (b*), the best static configuration over the limits and the bound;
* first-token deadlines (``--deadlines``), beside vLLM's default limits, the best static limits,
  and the controller's law: (a+), (b+), (c+).

The bounds are searched at one set of limits, not jointly with them (the joint grid would be
the limits' grid times the bounds'): (b*) is a coordinate search in hindsight, and says so.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from governor.bench.controller.admission import bound_label
from governor.bench.controller.loop import Admission, PolicyRun
from governor.common.quantiles import percentiles
from governor.controller.model import Limits

# Where a controller with deadlines should land (issue targets, benchmarks not tests).
TARGET_VS_BEST_STATIC = 0.95
TARGET_VS_DEFAULT = 3.0


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    static: Limits | None  # None: the controller
    admission: Admission | None


def first_jobs(top: Limits, slack: float, calibration: float | None) -> list[Job]:
    """What runs beside the headline runs: deadlines at vLLM's defaults and under the law."""
    deadlines = Admission(slack=slack, calibration=calibration)
    return [Job(f"(a+) default + {deadlines_label(calibration)}", top, deadlines),
            Job(f"(c+) controller + {deadlines_label(calibration)}", None, deadlines)]


def second_jobs(best: Limits, bounds: Sequence[int], slack: float,
                calibration: float | None) -> list[Job]:
    """Once the best static limits are known: each bound at them, and deadlines at them."""
    return [Job(f"static {label(best)} + bound {bound_label(b)}", best,
                Admission(max_tokens_ahead=b)) for b in bounds] + [
        Job(f"(b+) best static {label(best)} + {deadlines_label(calibration)}", best,
            Admission(slack=slack, calibration=calibration))]


def deadlines_label(calibration: float | None) -> str:
    """How a run's deadlines are named: with the calibration's quantile, or ``uncalibrated``."""
    return "deadlines (uncalibrated)" if calibration is None else \
        f"deadlines (calibrated at {calibration:g})"


def tag(name: str) -> str:
    """``a+``, ``b+`` or ``c+`` for the runs with deadlines; empty for a bound's."""
    return name[1:3] if name[:4] in ("(a+)", "(b+)", "(c+)") else ""


def label(limits: Limits | None) -> str:
    return "controller" if limits is None else \
        f"{limits.max_num_batched_tokens}/{limits.max_num_seqs}"


@dataclass(frozen=True, slots=True)
class Row:
    key: str
    name: str
    goodput: float
    attainment: float
    turned_away: int
    changes: int
    ttft_p99: float  # of the requests served (NaN: none)
    # The deadline gate's wait for the first token, actual minus predicted: P50 and P99 (NaN:
    # it predicted none).
    error_p50: float = math.nan
    error_p99: float = math.nan

    def as_dict(self, default: float, best: float) -> dict[str, Any]:
        return {"name": self.name, "goodput_rps": round(self.goodput, 3),
                "attainment": round(self.attainment, 4), "turned_away": self.turned_away,
                "goodput_vs_default": _ratio(self.goodput, default),
                "goodput_vs_best_static": _ratio(self.goodput, best), "changes": self.changes,
                "served_ttft_p99_s": _rounded(self.ttft_p99),
                "wait_error_p50_s": _rounded(self.error_p50),
                "wait_error_p99_s": _rounded(self.error_p99)}


def row_of(key: str, name: str, goodput: float, attainment: float, changes: int,
           run: PolicyRun | None) -> Row:
    """A run's row: its score, what it turned away, its served TTFT P99 and the gate's error."""
    if run is None:
        return Row(key, name, goodput, attainment, 0, changes, math.nan)
    ttfts = [o.ttft for o in run.outcomes if not math.isnan(o.ttft)]
    errors = [actual - predicted for predicted, actual in run.waits]
    p99, (e50, e99) = percentiles(ttfts, [99])[0], percentiles(errors, [50, 99])
    return Row(key, name, goodput, attainment, sum(run.turned_away.values()), changes, p99,
               e50, e99)


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 3)


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b > 0 else None


def summarize(rows: dict[str, Row], bounded: Sequence[Row], slack: float,
              calibration: float | None, bounds: Sequence[int], best_limits: Limits
              ) -> dict[str, Any]:
    """The table on stderr and the summary's ``admission`` entry. ``rows`` holds a, a+, b, b+,
    b*, c, c+; ``bounded``, each bound at the best static limits."""
    default, best = rows["a"].goodput, rows["b*"].goodput
    table = [("policy", "attain", "goodput/s", "vs (a)", "vs (b*)", "turned away",
              "served ttft p99", "wait error p50/p99", "changes")]
    for row in rows.values():
        d = row.as_dict(default, best)
        error = "—" if math.isnan(row.error_p50) else \
            f"{row.error_p50:+.2f}s/{row.error_p99:+.2f}s"
        table.append((row.name, f"{row.attainment:.1%}", f"{row.goodput:.2f}",
                      _x(d["goodput_vs_default"]), _x(d["goodput_vs_best_static"]),
                      str(row.turned_away), f"{row.ttft_p99:.2f}s", error, str(row.changes)))
    width = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    calibrated = "uncalibrated" if calibration is None else f"calibrated at {calibration:g}"
    print(f"admission (deadlines at {slack:g}x each class's first-token target, {calibrated}; "
          f"bounds on the prompt tokens ahead at {label(best_limits)}):", file=sys.stderr)
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)), file=sys.stderr)
    grid = ", ".join(f"{r.name.rsplit(' ', 1)[-1]}: {r.goodput:.2f}" for r in bounded)
    print(f"bounds at {label(best_limits)} (goodput): {grid}", file=sys.stderr)
    controlled = rows["c+"].goodput
    return {
        "slack": slack, "calibration": calibration, "bounds": list(bounds),
        "bounds_at": best_limits.as_dict(),
        "runs": {key: row.as_dict(default, best) for key, row in rows.items()},
        "bounded": {r.name: r.as_dict(default, best) for r in bounded},
        "targets": {"goodput_vs_best_static": TARGET_VS_BEST_STATIC,
                    "goodput_vs_default": TARGET_VS_DEFAULT},
        "met": {"goodput_vs_best_static": controlled >= TARGET_VS_BEST_STATIC * best,
                "goodput_vs_default": controlled >= TARGET_VS_DEFAULT * default},
    }


def _x(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}x"

