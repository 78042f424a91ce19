"""How fast ``governor serve --deadlines`` refuses, and whether what it admits stays in time.

``python -m lab.overload.refusals`` starts ``governor serve`` on the sim in real time
(``llama-3-8b@h200``) with the shipped ``slo.yaml``'s classes and deadlines and a request log,
offers it open-loop chat prompts past its prefill capacity (each prompt its own, so that the
prefix cache saves nothing), and reads the request log back: per
class, the admitted requests' time to first token, and each refusal's time at the service (its
stages summed: from its first byte read to its last byte written) with the admission stage, the
gate's own decision, apart::

    python -m lab.overload.refusals --rate 35 --seconds 30     # about a minute
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from governor.bench.api import LoadSpec, run_load
from governor.common.cli import EnvArgumentParser, positive_int
from governor.common.commands import Serve
from governor.common.process import Child, free_port, running
from governor.common.quantiles import percentiles
from governor.contracts.endpoints import LOCAL_HOST
from governor.contracts.request_log import RequestRecord

PRESET = "llama-3-8b@h200"
WORDS = ("the", "committee", "will", "meet", "again", "next", "week", "to", "discuss", "the",
         "budget", "and", "the", "plan", "for", "the", "translation", "of", "the", "quarterly",
         "report")
# Stages up to the admission decision: reading, waiting for a text thread, parsing, rendering,
# tokenizing (a refusal needs the prompt's tokens).
BEFORE_ADMISSION = ("read", "text_queue", "parse", "render", "tokenize")


def prompts(count: int, low: int, high: int, seed: int) -> tuple[str, ...]:
    """``count`` prompts of ``low`` to ``high`` words."""
    rng = random.Random(seed)
    return tuple(" ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))
                 for _ in range(count))


def summarize(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """Per class: admitted requests and their time to first token; refusals and their time at the
    service, before the gate and in it (milliseconds, P50 and P99)."""
    by_class: dict[str, list[RequestRecord]] = {}
    for record in records:
        by_class.setdefault(record.request_class, []).append(record)
    return {name: _class_summary(rows) for name, rows in sorted(by_class.items())}


def _class_summary(rows: Sequence[RequestRecord]) -> dict[str, Any]:
    served = [r.ttft_seconds for r in rows if r.status == "200" and r.ttft_seconds is not None]
    refused = [r for r in rows if r.status == "429"]
    stages = [r.stages or {} for r in refused]
    return {
        "served": len(served), "ttft_p50_p99_s": _rounded(percentiles(served, [50, 99]), 3),
        "refused": len(refused),
        # Refused before a text thread tokenized them (before the body was read, or on the
        # prompt's estimated length).
        "refused_untokenized": sum(1 for s in stages if not s.get("tokenize")),
        "refusal_ms_p50_p99": _ms([sum(s.values()) for s in stages]),
        "before_admission_ms_p50_p99": _ms([sum(s.get(k, 0.0) for k in BEFORE_ADMISSION)
                                            for s in stages]),
        "admission_ms_p50_p99": _ms([s.get("admission", 0.0) for s in stages]),
        # Where a refusal's time went, stage by stage (those any refusal spent time in).
        "refusal_stages_ms_p50_p99": {
            stage: _ms([s.get(stage, 0.0) for s in stages])
            for stage in sorted({k for s in stages for k, v in s.items() if v > 0})},
    }


def _ms(seconds: Sequence[float]) -> list[float | None]:
    return _rounded([1e3 * v for v in percentiles(seconds, [50, 99])], 3)


def _rounded(values: Sequence[float], digits: int) -> list[float | None]:
    return [None if v != v else round(v, digits) for v in values]  # NaN: none measured


def read_log(path: Path) -> list[RequestRecord]:
    return [RequestRecord.from_mapping(json.loads(line))
            for line in path.read_text().splitlines() if line.strip()]


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    p = EnvArgumentParser(prog="python -m lab.overload.refusals", description=__doc__,
                          env_prefix="GOVERNOR_LAB_", env=env)
    p.add_argument("--rate", type=float, default=35.0, help="requests per second, open loop")
    p.add_argument("--seconds", type=positive_int, default=30, help="how long to offer them")
    p.add_argument("--words", default="800:2000",
                   help="prompt length in words, LOW:HIGH (about 1.2 tokens a word)")
    p.add_argument("--slo", default="slo.yaml", help="the spec whose classes and targets apply")
    p.add_argument("--deadline-calibration", default=None, metavar="Q|off",
                   help="governor serve --deadline-calibration (default: the server's, 0.9)")
    args = p.parse_args(argv)
    low, high = (int(x) for x in args.words.split(":"))
    with tempfile.TemporaryDirectory() as tmp:
        log, port = Path(tmp) / "requests.jsonl", free_port()
        url = f"http://{LOCAL_HOST}:{port}"
        serve = Serve(engine="sim", preset=PRESET, host=LOCAL_HOST, port=port, slo=args.slo,
                      request_log=str(log), deadlines=True, log_level="warning",
                      deadline_calibration=args.deadline_calibration)
        child = Child("serve", serve.python(), f"{url}/health", Path(tmp) / "serve.log")
        with running([child]):
            asyncio.run(run_load(LoadSpec(
                url=url, model=PRESET, requests=int(args.rate * args.seconds), concurrency=None,
                rate=args.rate, max_tokens=32,
                # One prompt per request: repeated ones would be prefilled from the prefix cache.
                prompts=prompts(int(args.rate * args.seconds), low, high, 1),
                max_outstanding=4096)))
        print(json.dumps({"rate": args.rate, "seconds": args.seconds, "words": args.words,
                          "classes": summarize(read_log(log))}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
