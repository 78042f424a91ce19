"""``table``: vLLM's own benchmark client (``vllm bench serve``) in closed loop at each
concurrency, against the running service (its first replica, when there are several), with the
limits set live for the whole table."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from lab.calibration.closed_loop import from_vllm_bench
from lab.live.stack import wait_ready
from lab.live.state import SERVED, State, set_limits, wait_idle

VLLM_BENCH = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


def table(args: argparse.Namespace) -> int:
    state = State.load(args.state)
    print(f"ready after {wait_ready(state):.0f} s", flush=True)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    set_limits(state, {"max_num_seqs": args.max_num_seqs,
                       "max_num_batched_tokens": args.max_num_batched_tokens})
    rows = []
    try:
        for concurrency in args.concurrency:
            wait_idle(state)
            name = f"closed-loop-c{concurrency}.json"
            argv = [sys.executable, "-c", VLLM_BENCH, "--backend", "vllm",
                    "--base-url", state.url("inference"), "--model", SERVED,
                    "--tokenizer", state.model, "--dataset-name", "random",
                    "--random-input-len", str(args.input_len),
                    "--random-output-len", str(args.output_len), "--random-range-ratio", "0",
                    "--ignore-eos", "--max-concurrency", str(concurrency),
                    "--num-prompts", str(concurrency * args.num_prompts_per_stream),
                    "--request-rate", "inf", "--percentile-metrics", "ttft,tpot,itl,e2el",
                    "--metric-percentiles", "50,99", "--save-result", "--save-detailed",
                    "--result-dir", str(out), "--result-filename", name, "--seed", str(args.seed)]
            started = time.monotonic()
            subprocess.run(argv, check=True, timeout=args.timeout)
            result = json.loads((out / name).read_text())
            row = from_vllm_bench(result).as_dict()
            rows.append(row)
            print(json.dumps({**row, "wall_seconds": round(time.monotonic() - started, 1)}),
                  flush=True)
    finally:
        set_limits(state, state.ceiling)
    summary = {"workload": {"dataset": "random", "input_len": args.input_len,
                            "output_len": args.output_len, "ignore_eos": True,
                            "num_prompts_per_stream": args.num_prompts_per_stream,
                            "limits": {"max_num_seqs": args.max_num_seqs,
                                       "max_num_batched_tokens": args.max_num_batched_tokens}},
               "environment": state.environment, "rows": rows}
    (out / "closed-loop.json").write_text(json.dumps(summary, indent=1) + "\n")
    return 0

