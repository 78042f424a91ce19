"""The controller benchmark on a live stack: a real engine, Prometheus, Alertmanager, controller.

``governor bench controller`` scores policies on the simulator in virtual time. This runs the same
workload and the same scoring against real processes over HTTP, on a GPU machine with vLLM (or on
any machine with the simulated engine in real time), in steps that each fit a short session::

    python -m lab.live start --engine vllm --model DIR --state /tmp/live
    python -m lab.live table --state /tmp/live --out OUT        # vllm bench serve
    python -m lab.live runs --state /tmp/live --out OUT \\
        --policies default,static:3072/1024,controller --minutes 4
    python -m lab.live stop --state /tmp/live
    python -m lab.live report OUT --out lab/results   # here, any time

    python -m lab.live drill healthy,batching,gpu_shared --state /tmp/live --out OUT

``start --replicas 2`` runs two servers, one per GPU, and every later step drives both: the runs
split the same arrivals between them round-robin, set a static policy's limits on both, and
start one controller with both as its targets.

Each step is a module: :mod:`lab.live.stack` (start, stop), :mod:`lab.live.table`,
:mod:`lab.live.runs` and :mod:`lab.live.report`; :mod:`lab.live.state` is what they share.
``drill`` (:mod:`lab.live.drill`) injects each cause of an SLO burn into the same stack, real
traffic or a co-tenant on the GPU (:mod:`lab.live.drills`), and watches the verdict.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from governor.common.cli import EnvArgumentParser, non_negative_int, positive_int
from lab.live.drill import Timing
from lab.live.drills import NAMES as DRILL_NAMES
from lab.live.runs import parse_policies


def _ints(text: str) -> tuple[int, ...]:
    values = tuple(int(x) for x in text.split(",") if x.strip())
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _drills(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    unknown = [name for name in names if name not in DRILL_NAMES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"expected drills among {', '.join(DRILL_NAMES)}, "
                                         f"got {text!r}")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = EnvArgumentParser(prog="python -m lab.live",
                               description=__doc__.split("\n\n")[0],
                               env_prefix="GOVERNOR_LIVE_LOOP_")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("start", help="start the service, Prometheus and Alertmanager")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--engine", choices=("vllm", "sim"), default="sim")
    p.add_argument("--server", choices=("governor", "vllm"), default="governor",
                   help="governor: governor serve; vllm: stock vllm serve with Governor's admin "
                        "middleware (--engine vllm; --engine-arg KEY=VALUE become vLLM's flags)")
    p.add_argument("--model", default=None, help="the vLLM model directory")
    p.add_argument("--preset", default="llama-3-8b@h200", help="the sim engine's preset")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"))
    p.add_argument("--max-num-seqs", type=positive_int, default=1024)
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192)
    p.add_argument("--max-model-len", type=positive_int, default=8192)
    p.add_argument("--engine-arg", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--prometheus-bin", default="prometheus")
    p.add_argument("--alertmanager-bin", default="prometheus-alertmanager")
    p.add_argument("--alertmanager-templates", type=Path, default=None, metavar="DIR",
                   help="copy DIR/*.tmpl where Debian's Alertmanager binary looks for them")
    p.add_argument("--replicas", type=positive_int, default=1,
                   help="servers side by side, replica i on GPU i (CUDA_VISIBLE_DEVICES) at the "
                        "inference port plus i; the runs split the arrivals between them")
    p.add_argument("--port-offset", type=non_negative_int, default=0,
                   help="added to every part's default port (a rehearsal beside another stack)")
    p.add_argument("--no-wait", action="store_true", help="return once everything is launched")
    p.add_argument("--parts", type=lambda s: tuple(s.split(",")),
                   default=("inference", "alertmanager", "prometheus", "exporter"),
                   help="which of inference, alertmanager, prometheus, exporter to start (a slow "
                        "engine can start in one command and the monitoring in the next); the "
                        "exporter reads the real GPUs beside vLLM, fake ones following the sim, "
                        "and starts once the engines answer")
    p.add_argument("--classes", action="store_true",
                   help="governor serve applies the spec's request classes (vLLM priority, "
                        "per-class admission, the class label), as governor up runs it")
    p.add_argument("--admission", action="store_true",
                   help="the deadline gate in front of the engine, from the spec's first-token "
                        "targets: governor serve --deadlines, or stock vllm serve's middleware "
                        "gate; runs refuse nothing by deadline except the controller's")
    p = commands.add_parser("table", help="vllm bench serve in closed loop at each concurrency")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--concurrency", type=_ints, default=(1, 32, 128, 256))
    p.add_argument("--input-len", type=positive_int, default=512)
    p.add_argument("--output-len", type=positive_int, default=256)
    p.add_argument("--num-prompts-per-stream", type=positive_int, default=4)
    p.add_argument("--max-num-seqs", type=positive_int, default=256)
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=300.0)
    p = commands.add_parser("runs", help="replay the workload once per policy")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--policies", type=parse_policies, default=parse_policies("default,controller"))
    p.add_argument("--workload", type=Path, default=None, metavar="FILE",
                   help="a workload file (phases or a named replay) or a request log, as "
                        "governor bench controller --workload takes it (default: the headline)")
    p.add_argument("--speed", type=float, default=1.0,
                   help="replay a request log this many times faster")
    p.add_argument("--minutes", type=float, default=None,
                   help="minutes of the workload to replay (default: 4 of the headline, all of "
                        "a --workload)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate-scale", type=float, default=1.0,
                   help="scale every arrival rate of phases (a rehearsal on a small machine)")
    p.add_argument("--first-index", type=int, default=0, help="number of the first run")
    p.add_argument("--drain", type=float, default=120.0, metavar="SECONDS",
                   help="requests still streaming this long after the last arrival are cut "
                        "off (not finished)")
    p = commands.add_parser("drill", help="inject causes of an SLO burn and watch the verdict")
    p.add_argument("drills", type=_drills, metavar="DRILL[,DRILL]",
                   help=f"one or more of {', '.join(DRILL_NAMES)}, comma-separated, in order")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--load-scale", type=float, default=1.0,
                   help="times every class's rate or clients (a rehearsal on a small machine)")
    p.add_argument("--warm-up", type=float, default=Timing.warm_up_seconds, metavar="SECONDS",
                   help="the healthy load alone before the onset")
    p.add_argument("--wait", type=float, default=Timing.wait_seconds, metavar="SECONDS",
                   help="how long after the onset a verdict is awaited (healthy: watched)")
    p.add_argument("--settle", type=float, default=Timing.settle_seconds, metavar="SECONDS",
                   help="polls after the verdict, for the controller's answer")
    p.add_argument("--clear", type=float, default=Timing.clear_seconds, metavar="SECONDS",
                   help="the longest wait for the last drill's burn to leave the window")
    p = commands.add_parser("forecast", help="the simulator's prediction of runs not yet made")
    p.add_argument("--workload", type=Path, default=None, metavar="FILE",
                   help="as runs takes it (default: the headline)")
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--minutes", type=float, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"), help="the spec start will run")
    p.add_argument("--max-model-len", type=positive_int, default=8192)
    p.add_argument("--max-num-seqs", type=positive_int, default=1024)
    p.add_argument("--max-num-batched-tokens", type=positive_int, default=8192)
    p.add_argument("--policies", type=parse_policies, default=parse_policies("default,controller"))
    p.add_argument("--presets", type=lambda s: tuple(x for x in s.split(",") if x),
                   default=("llama-3-8b@h200",), help="sim presets, comma-separated")
    p.add_argument("--admission", action="store_true",
                   help="the runs' stack has the deadline gate (start --admission)")
    p.add_argument("--window", type=float, default=20.0, help="attainment window (s)")
    p.add_argument("--out", type=Path, default=None, help="write the forecast here (JSON)")
    p = commands.add_parser("stop", help="stop what start launched")
    p.add_argument("--state", type=Path, required=True)
    p = commands.add_parser("report", help="score run files like governor bench controller")
    p.add_argument("results", type=Path, nargs="+", help="folders holding run-*.json.gz")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--window", type=float, default=20.0, help="attainment window (s)")
    p.add_argument("--predict", default="llama-3-8b@h200", metavar="PRESET",
                   help="replay each run on this sim preset for its prediction ('none': skip)")
    p.add_argument("--slo", type=Path, default=Path("slo.yaml"),
                   help="the spec the stack ran on (start --slo): its thresholds score the runs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "report":
        from lab.live.report import report

        return report(args)
    if args.command == "forecast":
        from lab.live.predict import forecast

        args.ceiling = {"max_num_seqs": args.max_num_seqs,
                        "max_num_batched_tokens": args.max_num_batched_tokens}
        return forecast(args)
    if args.command == "drill":
        from lab.live.drill import drill

        args.timing = Timing(args.warm_up, args.wait, args.settle, args.clear)
        return drill(args)
    from lab.live import runs, stack, table

    command = {"start": stack.start, "table": table.table, "runs": runs.runs,
               "stop": stack.stop}[args.command]
    result: int = command(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
