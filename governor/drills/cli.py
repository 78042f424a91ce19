"""``governor drill CAUSE``: inject a cause of a latency SLO burn into the embedded stack, and
show what a team would see: the alerts that fire, the verdict, the controller's actions.

    governor drill batching                       # one drill on slo.yaml; the last line is JSON
    governor drill gpu_throttled --slo examples/stock-vllm/slo.yaml --seed 2
    governor drill healthy --load-scale 1.5       # nothing injected: no verdict expected
    governor drill list                           # every drill and what it injects
    governor drill all --seeds 1,2,3 --out .run/drills     # the matrix, scored (resumable)
    governor drill all --summarize .run/drills    # the score again, from drills.jsonl

Each drill starts its own stack (``governor up``'s parts, on six ports from ``--port-base``),
drives a healthy load for ``--onset`` seconds, injects its cause, and polls Prometheus until a
verdict holds or ``--wait`` seconds pass. The stack is stopped at the end (Ctrl-C included)
unless ``--keep``. docs/drills.md says what each drill injects and how to read the output.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from governor.common.cli import EnvArgumentParser, parse_duration_seconds, positive_int
from governor.drills import catalog
from governor.drills.matrix import MatrixOptions, run_matrix, summarize
from governor.drills.run import (
    DEFAULT_PORT_BASE,
    DrillError,
    DrillOptions,
    Interrupted,
    run_drill,
)
from governor.up import EXIT_INTERRUPTED
from governor.up import Interrupted as Signals

ALL, LIST = "all", "list"
EXIT_FAILED = 1
EXIT_USAGE = 2


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _numbers(kind: type[int] | type[float]) -> Callable[[str], tuple[float, ...]]:
    """A parser of comma-separated numbers: ``"1,2,3"`` → ``(1, 2, 3)``."""

    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(kind(part) for part in text.split(",") if part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}") from None
        if not values:
            raise argparse.ArgumentTypeError("an empty list")
        return values
    return parse


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="governor drill", env_prefix="GOVERNOR_DRILL_",
                          description=__doc__,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("drill", metavar="CAUSE",
                   help=f"one of {', '.join(catalog.NAMES)}; {ALL} (the matrix) or {LIST}")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the SLO spec")
    p.add_argument("--seed", type=int, default=1, help="the load's and the engine's seed")
    p.add_argument("--onset", type=parse_duration_seconds, default=90.0,
                   help="healthy warm-up before the cause is injected")
    p.add_argument("--wait", type=parse_duration_seconds, default=150.0,
                   help="how long after the onset to wait for a verdict")
    p.add_argument("--settle", type=parse_duration_seconds, default=45.0,
                   help="how long to keep watching after the verdict (the controller's answer)")
    p.add_argument("--port-base", type=int, default=DEFAULT_PORT_BASE,
                   help="the stack's six ports start here (inference, exporter, controller, "
                        "Prometheus, Alertmanager, probe)")
    p.add_argument("--run-dir", type=Path, default=None,
                   help="configuration, data and logs (default .run/drill/CAUSE); a drill "
                        "clears the data and logs a former one left there")
    p.add_argument("--keep", action="store_true",
                   help="leave the stack up at the end, as the drill left it, until Ctrl-C")
    p.add_argument("--load-scale", type=_positive_float, default=1.0,
                   help="times the healthy load")
    matrix = p.add_argument_group(f"{ALL}: the matrix")
    matrix.add_argument("--seeds", type=_numbers(int), default=(1, 2, 3),
                        help="seeds of every drill (comma-separated)")
    matrix.add_argument("--loads", type=_numbers(float), default=(0.5, 1.0, 1.5),
                        help="the healthy drill's load scales (comma-separated)")
    matrix.add_argument("--out", type=Path, default=Path(".run/drills"),
                        help="drills.jsonl and each drill's run directory")
    matrix.add_argument("--parallel", type=positive_int, default=1, metavar="N",
                        help="drills at once, each on its own ports (--port-base + 10 per "
                             "drill); give each a core or two")
    matrix.add_argument("--start-by", type=parse_duration_seconds, default=None,
                        metavar="DURATION",
                        help="start no drill after this long (a time-boxed job); run the "
                             "matrix again to go on where it stopped")
    matrix.add_argument("--summarize", type=Path, default=None, metavar="DIR",
                        help="print the score of DIR/drills.jsonl and run nothing")
    return p


def _list() -> str:
    width = max(len(name) for name in catalog.NAMES)
    return "\n".join(f"{d.name:<{width}}  {d.summary}" for d in catalog.DRILLS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.drill == LIST:
        print(_list())
        return 0
    if args.drill == ALL and args.summarize is not None:
        return _summarize(args.summarize)
    if args.drill not in (*catalog.NAMES, ALL):
        print(f"governor drill: no drill {args.drill!r}: one of {', '.join(catalog.NAMES)}, "
              f"or {ALL}, or {LIST}", file=sys.stderr)
        return EXIT_USAGE
    if not args.slo.is_file():
        print(f"governor drill: {args.slo}: no such spec file", file=sys.stderr)
        return EXIT_USAGE
    signals = Signals()
    signals.install()
    try:
        if args.drill == ALL:
            return run_matrix(_matrix_options(args), should_stop=signals)
        options = _options(args, args.drill)
        run_drill(options, should_stop=signals,
                  on_result=lambda result: print(result.json_line(), flush=True))
        return 0
    except Interrupted:
        print("governor drill: interrupted; the stack is stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    except DrillError as exc:
        print(f"governor drill: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _options(args: argparse.Namespace, drill: str) -> DrillOptions:
    return DrillOptions(drill=drill, slo=args.slo, seed=args.seed, onset_seconds=args.onset,
                        wait_seconds=args.wait, settle_seconds=args.settle,
                        port_base=args.port_base,
                        run_dir=args.run_dir or Path(".run/drill") / drill, keep=args.keep,
                        load_scale=args.load_scale)


def _matrix_options(args: argparse.Namespace) -> MatrixOptions:
    return MatrixOptions(out=args.out, base=_options(args, catalog.HEALTHY_NAME),
                         seeds=tuple(int(s) for s in args.seeds),
                         loads=tuple(float(x) for x in args.loads), parallel=args.parallel,
                         start_by=args.start_by)


def _summarize(out: Path) -> int:
    try:
        print(summarize(out))
    except FileNotFoundError as exc:
        print(f"governor drill: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return 0
