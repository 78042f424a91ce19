"""The service over real vLLM on a GPU: streaming load over HTTP, live retuning, nested traces.

Runs ``governor serve --engine vllm`` on the model it is given (a dummy-weight Llama-3-8B on an
H200) with the engine options of docs/h200-measurements.md, then, all over HTTP:

1. decode sweep: B requests at once (128-token prompts, 256 output tokens, EOS ignored) for each
   B, client-side TTFT/ITL P50/P99 and throughput, next to the original in-process numbers;
2. prefill: TTFT of one request alone (1 output token) per prompt length, next to the original;
3. live retuning of the token budget: TTFT of a lone 2048-token prompt at budget 8192, at 512
   (prefill in 4 chunks), and back at 8192;
4. live retuning of the running cap: 128 requests run, the cap drops to 16 while they run
   (the engine must clamp, not die), 96 more arrive and run 16 at a time, the cap rises back
   and the queue drains at once; ``vllm:num_requests_running`` is sampled from ``/metrics``;
5. one traced request: vLLM's ``llm_request`` span must have the service's SERVER span as parent;
6. ``/metrics`` must carry both ``vllm:*`` and ``governor_*`` families, each once.

Everything lands in ``--out`` as JSON (plus the service's log)::

    python -m lab.gpu.vllm_proof --model $GPUKIT_MODEL --out $OUT
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from governor.bench.api import LoadSpec, run_load, summarize
from governor.common.commands import Serve
from governor.common.process import Child
from governor.contracts.endpoints import LOCAL_HOST
from governor.contracts.metrics import vllm

ADMIN_TOKEN = "gpu-proof-admin-token"
SERVED = "llama-3-8b"
PORT = 8000
MAX_NUM_SEQS = 256
MAX_NUM_BATCHED_TOKENS = 8192
# docs/h200-measurements.md: measured in the AsyncLLM process, no HTTP (ms, tokens/s).
REFERENCE_DECODE = {
    1: {"itl_p50": 4.85, "itl_p99": 5.49, "tokens_per_second": 206},
    8: {"itl_p50": 5.00, "itl_p99": 5.74, "tokens_per_second": 1600},
    32: {"itl_p50": 5.47, "itl_p99": 6.00, "tokens_per_second": 5854},
    64: {"itl_p50": 6.07, "itl_p99": 6.94, "tokens_per_second": 10552},
    128: {"itl_p50": 7.45, "itl_p99": 8.77, "tokens_per_second": 17193},
    256: {"itl_p50": 11.24, "itl_p99": 13.93, "tokens_per_second": 22772},
}
# ITLs skipped per request for the steady-state tail: enough for a wave's prefill to finish.
PREFILL_STEPS = 8
REFERENCE_TTFT_MS = {128: 11.8, 512: 16.3, 1024: 28.9, 2048: 51.8, 4096: 101.9}
GPU_ENGINE_ARGS = ("load_format=dummy", "gpu_memory_utilization=0.85",
                   "enable_prefix_caching=false")


class TraceSink:
    """OTLP/HTTP receiver keeping (trace, span, parent, name, service) of every span."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[dict[str, str]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource_spans in request.resource_spans:
                    service = next((kv.value.string_value for kv in
                                    resource_spans.resource.attributes
                                    if kv.key == "service.name"), "")
                    for scope in resource_spans.scope_spans:
                        sink.spans.extend({
                            "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(), "name": span.name,
                            "service": service,
                        } for span in scope.spans)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"


def full_vocab_model(model: Path, directory: Path) -> Path:
    """A copy of ``model`` whose tokenizer decodes every id the model can emit.

    A dummy Llama-3-8B built offline has Llama-3's 128,256-row vocabulary but a locally trained
    8,192-token tokenizer, so ~94% of the random model's tokens decode to nothing and a stream
    shows text only every ~15th token: client-side ITL would measure 15 steps. Giving ids
    8192… a plain word each (``x8192``…; unreachable when encoding, so prompts are unchanged)
    makes every token visible, like the real Llama-3 tokenizer. The model itself is untouched.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer_config.json"):
        shutil.copy(model / name, directory / name)
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    vocab: dict[str, int] = tokenizer["model"]["vocab"]
    size = json.loads((model / "config.json").read_text())["vocab_size"]
    vocab.update({f"x{i}": i for i in range(len(vocab), size)})
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    return directory


def prompt_of(tokenizer: Any, length: int, seed: int) -> str:
    """Random words whose encoding is exactly ``length`` tokens."""
    rng = random.Random(seed)
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and 3 <= len(w) <= 7][:4000]
    text = ""
    while len(tokenizer.encode(text).ids) < length:
        text += " " + rng.choice(words)
    while len(tokenizer.encode(text).ids) > length:
        text = text.rsplit(" ", 1)[0]
    return text


@dataclass(frozen=True)
class Plan:
    """The sizes of each step: the GPU's, or a small one to rehearse on CPU (``--smoke``)."""

    engine_args: tuple[str, ...] = GPU_ENGINE_ARGS
    max_model_len: int = 8192
    batches: tuple[int, ...] = tuple(sorted(REFERENCE_DECODE))
    decode_tokens: int = 256
    prompt_lengths: tuple[int, ...] = tuple(REFERENCE_TTFT_MS)
    cap_first: int = 128
    cap_first_tokens: int = 512
    cap_low: int = 16
    cap_second: int = 96
    cap_second_tokens: int = 256
    budget_prompt: int = 2048


SMOKE = Plan(engine_args=("dtype=float32", "load_format=dummy", "enforce_eager=true",
                          "generation_config=vllm", f"kv_cache_memory_bytes={512 * 2**20}",
                          "enable_prefix_caching=false"),
             max_model_len=2048, batches=(1, 8), decode_tokens=32, prompt_lengths=(128, 512),
             cap_first=16, cap_first_tokens=96, cap_low=2, cap_second=12, cap_second_tokens=48,
             budget_prompt=1024)


@contextlib.contextmanager
def service(model: str, otlp: str, log: Path, plan: Plan) -> Iterator[Child]:
    """The service started, not yet healthy: :func:`prove` times its start-up."""
    argv = Serve(engine="vllm", model=model, served_model_name=SERVED, host=LOCAL_HOST,
                 port=PORT, max_num_seqs=MAX_NUM_SEQS,
                 max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS, max_model_len=plan.max_model_len,
                 min_num_seqs=1, min_num_batched_tokens=256, max_in_flight=1024,
                 max_tokens_limit=8192, otlp_endpoint=otlp,
                 engine_arg=tuple(plan.engine_args)).python()
    env = {**os.environ, "GOVERNOR_ADMIN_TOKEN": ADMIN_TOKEN}
    with Child("the service", argv, f"http://127.0.0.1:{PORT}/health", log, env=env,
               fresh_log=True, grace_seconds=60) as child:
        yield child


class Client:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.url = f"http://127.0.0.1:{PORT}"

    async def put(self, **limits: int) -> dict[str, Any]:
        async with self.session.put(
            f"{self.url}/admin/batching", json=limits,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        ) as response:
            body: dict[str, Any] = await response.json()
            if response.status != 200:
                raise RuntimeError(f"PUT /admin/batching {limits}: {response.status} {body}")
            return body

    async def families(self) -> dict[str, list[Any]]:
        async with self.session.get(f"{self.url}/metrics") as response:
            text = await response.text()
        found: dict[str, list[Any]] = {}
        for family in text_string_to_metric_families(text):
            found.setdefault(family.name, []).append(family)
        return found

    async def running(self) -> float:
        family = (await self.families()).get(vllm.NUM_REQUESTS_RUNNING.name, [])
        return float(sum(sample.value for f in family for sample in f.samples))

    async def ttft_alone(self, prompt: str, runs: int = 5) -> list[float]:
        """Milliseconds to the first token of a request alone, one output token (as measured
        in-process on the H200)."""
        spec = LoadSpec(url=self.url, model=SERVED, requests=1, concurrency=1, prompt=prompt,
                        max_tokens=1, chat=False)
        values = []
        for _ in range(runs):
            load = await run_load(spec)
            ttft = load.results[0].ttft
            if ttft is not None:
                values.append(ttft * 1e3)
        return values


def ms(summary: dict[str, Any], key: str, quantile: str) -> float | None:
    value = summary[key][quantile]
    return None if value is None else round(value * 1e3, 3)


async def decode_sweep(client: Client, prompt: str, plan: Plan) -> list[dict[str, Any]]:
    rows = []
    for batch in plan.batches:
        spec = LoadSpec(url=client.url, model=SERVED, requests=batch, concurrency=batch,
                        prompt=prompt, max_tokens=plan.decode_tokens, chat=False)
        load = await run_load(spec)
        summary = summarize(load)
        itl_p50 = ms(summary, "itl_seconds", "p50")
        # The wave's first steps also carry its B x 128 prompt tokens (B=256: four 8192-token
        # chunks); the original H200 run measured decode-only steps, so the steady tail is
        # reported beside the tail.
        steady = [x for r in load.results if r.ok for x in r.itls[PREFILL_STEPS:]]
        rows.append({
            "batch": batch, "errors": summary["errors"],
            "ttft_p50_ms": ms(summary, "ttft_seconds", "p50"),
            "ttft_p99_ms": ms(summary, "ttft_seconds", "p99"),
            "itl_p50_ms": itl_p50, "itl_p99_ms": ms(summary, "itl_seconds", "p99"),
            "itl_p99_ms_after_prefill": round(
                statistics.quantiles(steady, n=100)[98] * 1e3, 3) if len(steady) > 100 else None,
            "output_tokens_per_second": round(summary["output_tokens_per_second"], 1),
            # Comparable with the original run's "decode tokens/s": B streams, one token each per
            # ITL.
            "decode_tokens_per_second": round(batch / (itl_p50 / 1e3), 1) if itl_p50 else None,
            "reference_in_process": REFERENCE_DECODE.get(batch),
        })
        print(json.dumps(rows[-1]), flush=True)
    return rows


async def sample_running(client: Client, stop: asyncio.Event, t0: float,
                         series: list[tuple[float, float]]) -> None:
    while not stop.is_set():
        series.append((round(time.monotonic() - t0, 3), await client.running()))
        await asyncio.sleep(0.1)


async def cap_retuning(client: Client, prompt: str, plan: Plan) -> dict[str, Any]:
    """128 running, cap → 16 under them, 96 more queue behind, cap → 256 drains the queue."""
    first = LoadSpec(url=client.url, model=SERVED, requests=plan.cap_first,
                     concurrency=plan.cap_first, prompt=prompt,
                     max_tokens=plan.cap_first_tokens, chat=False)
    second = LoadSpec(url=client.url, model=SERVED, requests=plan.cap_second,
                      concurrency=plan.cap_second, prompt=prompt,
                      max_tokens=plan.cap_second_tokens, chat=False)
    series: list[tuple[float, float]] = []
    events: list[tuple[float, str]] = []
    stop = asyncio.Event()
    t0 = time.monotonic()
    sampler = asyncio.create_task(sample_running(client, stop, t0, series))
    first_run = asyncio.create_task(run_load(first))
    await asyncio.sleep(1.0)
    running_at_change = await client.running()
    await client.put(max_num_seqs=plan.cap_low)
    events.append((time.monotonic() - t0,
                   f"cap {MAX_NUM_SEQS} -> {plan.cap_low} with {running_at_change:.0f} running"))
    await asyncio.sleep(0.5)
    second_run = asyncio.create_task(run_load(second))
    events.append((time.monotonic() - t0, f"{plan.cap_second} more requests"))
    first_summary = summarize(await first_run)
    events.append((time.monotonic() - t0, f"the first {plan.cap_first} finished"))
    await asyncio.sleep(2.0)  # the second wave now runs cap_low at a time
    capped = [value for t, value in series if t > events[-1][0] + 0.3]
    await client.put(max_num_seqs=MAX_NUM_SEQS)
    events.append((time.monotonic() - t0, f"cap {plan.cap_low} -> {MAX_NUM_SEQS}"))
    raised_at = events[-1][0]
    second_summary = summarize(await second_run)
    stop.set()
    await sampler
    after_raise = [value for t, value in series if t > raised_at + 0.2]
    return {
        "running_when_lowered": running_at_change,
        "cap_low": plan.cap_low,
        "max_running_while_capped": max(capped) if capped else None,
        "max_running_after_raise": max(after_raise) if after_raise else None,
        "first_wave": {"ok": first_summary["ok"], "errors": first_summary["errors"]},
        "second_wave": {"ok": second_summary["ok"], "errors": second_summary["errors"]},
        "events": events, "running_series": series,
    }


async def budget_retuning(client: Client, prompt: str) -> dict[str, Any]:
    result = {}
    for label, budget in (("8192", 8192), ("512", 512), ("8192 again", 8192)):
        await client.put(max_num_batched_tokens=budget)
        values = await client.ttft_alone(prompt)
        result[label] = {"ttft_ms_median": round(statistics.median(values), 2),
                         "ttft_ms": [round(v, 2) for v in values]}
        print("budget", label, result[label], flush=True)
    return result


async def traced_request(client: Client, sink: TraceSink, prompt: str) -> dict[str, Any]:
    trace_id = "a1f92f3577b34da6a3ce929d0e0e4799"
    async with client.session.post(
        f"{client.url}/v1/completions",
        json={"model": SERVED, "prompt": prompt, "max_tokens": 8, "ignore_eos": True},
        headers={"traceparent": f"00-{trace_id}-30f067aa0ba902ba-01"},
    ) as response:
        await response.read()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        mine = [s for s in sink.spans if s["trace_id"] == trace_id]
        names_seen = {s["name"] for s in mine}
        if {"llm_request", "POST /v1/completions"} <= names_seen:
            server = next(s for s in mine if s["name"] == "POST /v1/completions")
            engine = next(s for s in mine if s["name"] == "llm_request")
            return {"one_trace": True, "spans": mine,
                    "llm_request_parent_is_server_span":
                        engine["parent_span_id"] == server["span_id"]}
        await asyncio.sleep(0.5)
    return {"one_trace": False, "spans": [s for s in sink.spans if s["trace_id"] == trace_id]}


async def stage(report: dict[str, Any], name: str, step: Awaitable[Any]) -> None:
    """Run one step into ``report[name]``; a failure is recorded and the next step still runs
    (a GPU call is too scarce to lose the rest of it to one mistake)."""
    try:
        report[name] = await step
    except Exception as error:
        report[name] = {"error": f"{type(error).__name__}: {error}"}
    print(name, json.dumps(report[name])[:2000], flush=True)


async def prefill(client: Client, prompts: dict[int, str], plan: Plan) -> dict[int, Any]:
    result = {}
    for length in plan.prompt_lengths:
        values = await client.ttft_alone(prompts[length])
        result[length] = {
            "median": round(statistics.median(values), 2) if values else None,
            "runs": [round(v, 2) for v in values],
            "reference_in_process": REFERENCE_TTFT_MS.get(length)}
    return result


async def metrics_check(client: Client) -> dict[str, Any]:
    families = await client.families()
    return {
        "vllm_families": sorted(n for n in families if n.startswith("vllm:")),
        "governor_families": sorted(n for n in families if n.startswith("governor_")),
        "duplicates": sorted(n for n, fs in families.items() if len(fs) > 1),
    }


async def final_limits(client: Client) -> Any:
    async with client.session.get(f"{client.url}/admin/batching",
                                  headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as r:
        return await r.json()


async def prove(model: str, out: Path, sink: TraceSink, plan: Plan) -> dict[str, Any]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(model) / "tokenizer.json"))
    lengths = {128, plan.budget_prompt, *plan.prompt_lengths}
    prompts = {n: prompt_of(tokenizer, n, seed=n) for n in lengths}
    report: dict[str, Any] = {"plan": dataclasses.asdict(plan)}
    timeout = aiohttp.ClientTimeout(total=30)
    with service(model, sink.endpoint, out / "service.log", plan) as child:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            client = Client(session)
            report["startup_seconds"] = round(await child.wait_healthy_async(400), 1)
            print("healthy after", report["startup_seconds"], "s", flush=True)
            warm = LoadSpec(url=client.url, model=SERVED, requests=16, concurrency=8,
                            prompt=prompts[128], max_tokens=32, chat=False)
            summarize(await run_load(warm))
            await stage(report, "decode", decode_sweep(client, prompts[128], plan))
            await stage(report, "prefill_ttft_ms", prefill(client, prompts, plan))
            await stage(report, "budget_retuning",
                        budget_retuning(client, prompts[plan.budget_prompt]))
            await stage(report, "cap_retuning", cap_retuning(client, prompts[128], plan))
            await stage(report, "trace", traced_request(client, sink, prompts[128]))
            await stage(report, "metrics", metrics_check(client))
            await stage(report, "final_limits", final_limits(client))
            report["service_alive_at_end"] = child.poll() is None
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--smoke", action="store_true",
                        help="small sizes and CPU engine options, to rehearse without a GPU")
    args = parser.parse_args()
    plan = SMOKE if args.smoke else Plan()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Not under --out: everything there is sent back.
    model = full_vocab_model(Path(args.model), Path(tempfile.mkdtemp()) / "model")
    sink = TraceSink()
    try:
        report = asyncio.run(prove(str(model), out, sink, plan))
    finally:
        (out / "spans.json").write_text(json.dumps(sink.spans[-2000:]))
    (out / "gpu_proof.json").write_text(json.dumps(report, indent=1))
    print("done:", json.dumps({k: v for k, v in report.items()
                               if k not in {"cap_retuning", "metrics", "trace"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
