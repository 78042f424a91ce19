"""The inference board: latency against the SLO lines, throughput, the scheduler, the knobs.

The latency panels read the service's own histograms (what a client sees on the HTTP stream,
with trace-id exemplars) and draw each latency SLO of the spec on the histogram it is defined
on, at the quantile its objective names: move a threshold in slo.yaml and the line moves.
With request classes in the spec, a ``$class`` variable filters the service's series, the
latency, request and rejection panels split by class, and each class's own threshold is drawn
too. Engine series keep vLLM's names, so the lower rows also work on a plain vLLM fleet; on a
fleet of stock ``vllm serve`` (``kubernetes.server: vllm``) the upper rows read vLLM's own
histograms and HTTP counter and the limits the controller read (:mod:`.servers`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from grafana_foundation_sdk.builders import heatmap as hm_builder
from grafana_foundation_sdk.builders import timeseries as ts_builder
from grafana_foundation_sdk.cog import builder as cog
from grafana_foundation_sdk.models import dashboard as dm

from governor.contracts.declaration import Metric
from governor.contracts.metrics import controller as c
from governor.contracts.metrics import runtime as rt
from governor.contracts.metrics import service as m
from governor.contracts.metrics import vllm
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.promql import (
    LE,
    Matcher,
    Selector,
    aggregate,
    eq,
    format_duration,
    format_number,
    histogram_quantile,
    mean,
    one_of,
    parse_selector,
    rate,
    ratio_of_rates,
    regex,
    sum_by,
)
from governor.contracts.stages import BEFORE_FIRST_TOKEN, FIRST_TOKEN, Stage
from governor.dashboards import controller_events
from governor.dashboards.board import Board, BoardInfo, fleet_variables, label_variable
from governor.dashboards.cost_row import cost_row
from governor.dashboards.panels import (
    NAME_ONLY,
    Line,
    Query,
    Spec,
    heatmap,
    stat,
    text,
    timeseries,
)
from governor.dashboards.probe_panels import probe_row
from governor.dashboards.servers import NOT_ON_STOCK_VLLM, ServerSeries, series_of
from governor.dashboards.variables import RATE_INTERVAL, ref, scope, variable
from governor.slo.class_fields import own_class
from governor.slo.fleet import PREFIX_CACHE_BASELINE_STEP, PrefixCacheAlert
from governor.slo.spec import LatencySLI, RatioSLI, SloSpec

INFO: Final = BoardInfo(
    "governor-inference", "Governor / Inference",
    "Latency against the SLOs, token throughput, queueing, KV cache and the batching limits "
    "the controller moves.")
QUANTILES: Final = (0.5, 0.9)
# The health alert on the KV cache (alerts.health_rules) fires above this share.
KV_NEAR_FULL: Final = 0.95
LABELS: Final = scope()
# The service's own series, filtered by the $class variable (with request classes).
CLASSED: Final = scope(**{m.LABEL_CLASS: variable(m.LABEL_CLASS)})


def _series(name: str, *extra: Matcher) -> Selector:
    return Selector(name, (*LABELS, *extra))


def _rate(counter: Metric, labels: tuple[Matcher, ...] = LABELS) -> str:
    return rate(Selector(counter.total, labels), RATE_INTERVAL)


def _by_class(spec: SloSpec) -> tuple[str, ...]:
    return (m.LABEL_CLASS,) if spec.classes.declared else ()


def _service_scope(spec: SloSpec) -> tuple[Matcher, ...]:
    return CLASSED if spec.classes.declared else LABELS


def slo_quantile(objective: float) -> float:
    """The quantile an objective names: 99% of events good → the 0.99 quantile."""
    return float(format_number(objective))


def slo_lines(spec: SloSpec, histogram: str) -> list[tuple[float, float]]:
    """(quantile, threshold) of every latency SLO defined on ``histogram``."""
    return sorted((slo_quantile(slo.objective), slo.sli.threshold_seconds) for slo in spec.slos
                  if isinstance(slo.sli, LatencySLI) and slo.sli.metric == histogram)


def class_lines(spec: SloSpec, histogram: str) -> list[tuple[str, float]]:
    """(class, threshold) where a class's threshold differs from its latency SLO's on
    ``histogram``."""
    found = []
    for slo in spec.slos:
        sli = slo.sli
        if isinstance(sli, LatencySLI) and sli.metric == histogram and spec.classes.declared \
                and not own_class(slo):
            found += [(c.name, t) for c in spec.classes.classes
                      if (t := c.threshold(slo.name, sli.threshold_seconds))
                      != sli.threshold_seconds]
    return found


def latency_panel(title: str, about: str, histogram: str, spec: SloSpec,
                  by: Sequence[str] = (), *, exemplars: bool = True) -> ts_builder.Panel:
    """Quantiles of ``histogram`` (p50, p90 and each SLO's), with its SLO thresholds dashed, and
    each request class's own threshold where it differs."""
    slos = slo_lines(spec, histogram)
    classes = class_lines(spec, histogram)
    quantiles = sorted({*QUANTILES, *(q for q, _ in slos)})
    by = (*by, *_by_class(spec))
    suffix = "".join(f" {ref(label)}" for label in by)
    queries = [Query(histogram_quantile(q, histogram, _service_scope(spec), RATE_INTERVAL, by),
                     f"p{format_number(q * 100)}{suffix}", exemplar=exemplars)
               for q in quantiles]
    if slos:
        targets = ", ".join(f"p{format_number(q * 100)} ≤ {format_number(t)} s" for q, t in slos)
        targets += "".join(f"; {name} ≤ {format_number(t)} s" for name, t in classes)
        title += f" (SLO: {targets})"
        about += " Dashed: the SLO threshold from slo.yaml" + (
            ", and each request class's own." if classes else ".")
    lines = sorted({t for _, t in slos} | {t for _, t in classes})
    return timeseries(Spec(title, about, "s"), queries, lines=[Line(t) for t in lines])


def _latency_row(spec: SloSpec, series: ServerSeries, board: Board) -> None:
    if series.stock_vllm:
        board.row("Latency as vLLM measures it")
        ttft = ("From the request's arrival at vLLM to its first token, queueing included "
                "(vLLM's engine histogram; stock vLLM measures nothing on the HTTP stream).")
        itl = ("Gap between successive tokens of one response as vLLM's engine emits them. "
               "Long prefills batched with decodes stretch it.")
    else:
        board.row("Latency as clients see it")
        ttft = ("From request arrival to the first streamed token, queueing included. "
                "Exemplars link to the request's trace.")
        itl = ("Gap between successive streamed tokens of one response: what a reader of the "
               "stream feels. Long prefills batched with decodes stretch it.")
    board.panel(latency_panel("Time to first token", ttft, series.ttft.name, spec,
                              exemplars=series.exemplars))
    board.panel(latency_panel("Inter-token latency", itl, series.itl.name, spec,
                              exemplars=series.exemplars))
    if series.stock_vllm:
        # vLLM's per-route duration histogram (http_request_duration_seconds) ends at 1 s.
        duration = ("Request duration (end to end in vLLM)", "From arrival at vLLM to its "
                    "last token, every route together (vLLM's per-route duration histogram "
                    "stops at 1 s).")
    else:
        duration = ("Request duration by route", "Arrival to the last byte of the response "
                    "(end to end).")
    board.panel(latency_panel(*duration, series.duration.name, spec, by=series.duration_by,
                              exemplars=series.exemplars))
    board.panel(timeseries(
        Spec("Where engine time goes (mean)", "vLLM's per-request phases: waiting for a "
             "running slot, prefill (prompt) and decode (generation).", "s"),
        [Query(mean(vllm.REQUEST_QUEUE_TIME.name, LABELS, RATE_INTERVAL), "queue"),
         Query(mean(vllm.REQUEST_PREFILL_TIME.name, LABELS, RATE_INTERVAL), "prefill"),
         Query(mean(vllm.REQUEST_DECODE_TIME.name, LABELS, RATE_INTERVAL), "decode"),
         Query(mean(vllm.E2E_REQUEST_LATENCY.name, LABELS, RATE_INTERVAL), "end to end")],
        stacked=False))


def bucket_heatmap(title: str, about: str, histogram: Metric,
                   labels: tuple[Matcher, ...] = LABELS, *, exemplars: bool = False,
                   counted: str = "requests") -> hm_builder.Panel:
    """``counted`` (observations) per second in each bucket of ``histogram`` over time: the
    whole distribution, where a quantile line shows one point of it."""
    buckets = sum_by((LE,), rate(Selector(histogram.bucket, labels), RATE_INTERVAL))
    return heatmap(
        Spec(title, f"{about} Each column is a moment, each row a bucket of "
             f"{histogram.name} (labelled by its upper edge), darker where more {counted} "
             "fell, per second: two bands are two populations (a bimodal tail) that one "
             "quantile line averages into neither.", "s", width=8, height=7),
        Query(buckets, f"{{{{{LE}}}}}", exemplar=exemplars, buckets=True),
        cell_unit="reqps" if counted == "requests" else "short")


def _heatmap_row(spec: SloSpec, series: ServerSeries, board: Board) -> None:
    board.row("Latency heat maps")
    scope_ = _service_scope(spec)
    for title, about, histogram, counted in (
        ("Time to first token (heat map)", "Arrival to first token.", series.ttft, "requests"),
        ("Inter-token latency (heat map)", "Gaps between successive tokens.", series.itl,
         "gaps"),
        ("Request duration (heat map)", "Arrival to the last token, end to end.",
         series.duration, "requests"),
    ):
        board.panel(bucket_heatmap(title, about, histogram, scope_,
                                   exemplars=series.exemplars, counted=counted))
    if series.stock_vllm:
        # vLLM's own phases: what a stock fleet measures of a request's stages.
        for title, histogram in (("Queue (heat map)", vllm.REQUEST_QUEUE_TIME),
                                 ("Prefill (heat map)", vllm.REQUEST_PREFILL_TIME),
                                 ("Decode (heat map)", vllm.REQUEST_DECODE_TIME)):
            board.panel(bucket_heatmap(title, "One phase of vLLM's engine per request "
                                       "(waiting for a running slot, prompt, generation).",
                                       histogram))
        return
    for stage in Stage:
        board.panel(bucket_heatmap(
            f"Stage {stage.value} (heat map)", f"Time a request spent in its {stage.value} "
            "stage (see Where the time goes).", m.REQUEST_STAGE,
            (*LABELS, eq(m.LABEL_STAGE, stage.value))))


def request_slo_lines(spec: SloSpec) -> list[Line]:
    """The thresholds of the latency SLOs on a whole request's time (its first token, its
    duration): what a stack of one request's stages is compared with."""
    per_request = (m.TIME_TO_FIRST_TOKEN.name, m.REQUEST_DURATION.name)
    return [Line(t) for t in sorted({t for name in per_request for _, t in slo_lines(spec, name)})]


def _stage_panel(title: str, about: str, quantile: float | None, spec: SloSpec,
                 ) -> ts_builder.Panel:
    """Each stage's quantile (or mean) per request, stacked in the order a request passes
    them (a query each, so the stack keeps that order), with the per-request SLOs dashed."""
    queries = []
    for stage in Stage:
        if quantile is None:
            expr = _stage_mean(stage)
        else:
            expr = histogram_quantile(quantile, m.REQUEST_STAGE.name,
                                      (*LABELS, eq(m.LABEL_STAGE, stage.value)), RATE_INTERVAL)
        queries.append(Query(expr, stage.value))
    return timeseries(Spec(title, about, "s", width=8), queries, lines=request_slo_lines(spec),
                      stacked=True)


def _render_panel() -> ts_builder.Panel:
    """vLLM's own "before the engine" stage (vLLM >= 0.34): the chat template, tokenizing and
    multimodal preprocessing of each request, by request type."""
    by = (vllm.LABEL_REQUEST_TYPE,)
    render = vllm.REQUEST_RENDER_DURATION
    legend = ref(vllm.LABEL_REQUEST_TYPE)
    return timeseries(
        Spec("Rendering (before the engine)", "Time vLLM spends rendering a request before it "
             "reaches the engine: the chat template, tokenizing and multimodal preprocessing "
             f"({render.name}, vLLM 0.34 and later; older servers leave this panel empty). "
             "The first-token verdict counts it as tokenizer time: vLLM stamps a request's "
             "arrival after rendering, so its time to first token leaves this out.", "s",
             width=8),
        [*(Query(histogram_quantile(q, render.name, LABELS, RATE_INTERVAL, by=by),
                 f"p{format_number(q * 100)} {legend}") for q in (0.5, 0.99)),
         Query(mean(render.name, LABELS, RATE_INTERVAL, by=by), f"mean {legend}")])


def _ttft_by_prompt_panel(spec: SloSpec) -> ts_builder.Panel:
    """Time to first token per prompt-size bucket (the service's own histogram of it)."""
    by = (m.LABEL_PROMPT_SIZE,)
    legend = f"≤ {ref(m.LABEL_PROMPT_SIZE)} tokens"
    return timeseries(
        Spec("Time to first token by prompt size", "p50 and p99 of the time to first token "
             "for each prompt size (the smallest of "
             f"{', '.join(m.PROMPT_SIZES[:-1])} tokens a prompt fits in, or {m.PROMPT_SIZE_MORE}"
             "): prefill grows with the prompt, so a long-prompt bucket over the SLO line while "
             "short ones sit under it says the token budget or the prompts, not the queue. "
             "Dashed: the per-request latency SLOs.", "s", width=8),
        [Query(histogram_quantile(q, m.TIME_TO_FIRST_TOKEN_BY_PROMPT.name, LABELS,
                                  RATE_INTERVAL, by=by),
               f"p{format_number(q * 100)} {legend}") for q in (0.5, 0.99)],
        lines=request_slo_lines(spec))


def _prompt_lengths_panel() -> ts_builder.Panel:
    """Stock vLLM's prompt lengths: it has no latency series by prompt size, so the lengths go
    beside the time to first token."""
    tokens = vllm.REQUEST_PROMPT_TOKENS
    return timeseries(
        Spec("Prompt length", f"Quantiles of the prompt length in tokens ({tokens.name}, "
             "edges 1-2-5 up to the server's max_model_len). vLLM keeps no latency by prompt "
             "size: read a rise here against the time to first token above.", "short",
             width=8),
        [Query(histogram_quantile(q, tokens.name, LABELS, RATE_INTERVAL),
               f"p{format_number(q * 100)}") for q in (0.5, 0.9, 0.99)])


def _stages_row(spec: SloSpec, series: ServerSeries, board: Board) -> None:
    board.row("Where the time goes")
    if series.stock_vllm:
        board.panel(_render_panel())
        board.panel(_prompt_lengths_panel())
        board.panel(text(f"Where the time goes: {NOT_ON_STOCK_VLLM.lower()}", (
            f"**{NOT_ON_STOCK_VLLM}** but rendering.\n\nThe other stages of a request before "
            "and after the engine (reading, decoding, admission, writing the stream) are "
            "measured by `governor serve`.\nOn stock vLLM, see **Where engine time goes** "
            "above."), width=8, height=8))
        return
    stages = ", ".join(stage.value for stage in Stage)
    about = (f"Each stage of a request that reached the engine ({stages}), stacked in that "
             "order. Stages are contiguous from the first byte read to the last byte written, "
             "so a request's stages add up to its duration; other is what no stage explains. "
             "Dashed: the per-request latency SLOs.")
    board.panel(_stage_panel("Where the time goes (p50 per stage)", about, 0.5, spec))
    board.panel(_stage_panel("Where the time goes (p99 per stage)", about + " A sum of p99s "
                             "is not the p99 of the sum: it bounds it from above.", 0.99, spec))
    board.panel(_stage_panel("Where the time goes (mean per stage)", about + " The means add "
                             "up to the mean request duration (exactly over whole requests: "
                             "the stages before the first token are counted at it, the others "
                             "at the request's end).", None, spec))
    board.panel(_text_threads_panel())
    board.panel(_prompt_panel())
    board.panel(_ttft_by_prompt_panel(spec))


def _stage_mean(*stages: Stage) -> str:
    """Mean seconds per request in ``stages`` together: each stage counts every request once,
    those before the first token at the first token (the others at the request's end), so the
    requests are counted where the first of ``stages`` is (all on one side of the first
    token)."""
    assert len({stage in BEFORE_FIRST_TOKEN for stage in stages}) == 1, stages
    return ratio_of_rates(Selector(m.REQUEST_STAGE.sum, (*LABELS, _stages(*stages))),
                          Selector(m.REQUEST_STAGE.count, (*LABELS, _stages(stages[0]))),
                          RATE_INTERVAL)


def _stages(*stages: Stage) -> Matcher:
    return one_of(m.LABEL_STAGE, [stage.value for stage in stages])


def _text_threads_panel() -> ts_builder.Panel:
    return timeseries(
        Spec("Tokenizer and text threads", "Mean seconds per request tokenizing, and waiting "
             "for a text thread (--tokenizer-threads): when the tokenizer is the bottleneck, "
             "the wait grows with it. Before the engine: everything before the admission "
             "queue (reading, parsing, rendering, tokenizing and those waits).", "s"),
        [Query(_stage_mean(Stage.TOKENIZE), Stage.TOKENIZE.value),
         Query(_stage_mean(Stage.TEXT_QUEUE), Stage.TEXT_QUEUE.value),
         Query(_stage_mean(*FIRST_TOKEN.service), "before the engine")])


def _prompt_panel() -> ts_builder.Panel:
    per_byte = ratio_of_rates(Selector(m.REQUEST_STAGE.sum, (*LABELS, _stages(Stage.TOKENIZE))),
                              Selector(m.REQUEST_PROMPT_BYTES.sum, LABELS), RATE_INTERVAL)
    return timeseries(
        Spec("Prompt size and tokenizer cost", "Median prompt bytes and tokens of the "
             "requests that reached the engine, and what tokenizing cost per prompt byte, in "
             "nanoseconds.", "short"),
        [Query(histogram_quantile(0.5, m.REQUEST_PROMPT_BYTES.name, LABELS, RATE_INTERVAL),
               "bytes p50"),
         Query(histogram_quantile(0.5, m.REQUEST_PROMPT_TOKENS.name, LABELS, RATE_INTERVAL),
               "tokens p50"),
         Query(f"1e9 * ({per_byte})", "tokenize ns per byte")])


def counted_against(spec: SloSpec, requests: Metric = m.REQUESTS) -> str:
    """What of the request counter the spec's ratio SLOs count as errors, so that the board says
    what the SLO says (``… count against the availability SLO``), not that every 5xx does."""
    return "".join(
        f" `{slo.sli.errors}` count against the {slo.name} SLO." for slo in spec.slos
        if isinstance(slo.sli, RatioSLI) and parse_selector(slo.sli.total).metric
        == requests.total)


def _rejections(spec: SloSpec, series: ServerSeries) -> cog.Builder[dm.Panel]:
    if series.stock_vllm:
        reason = ref(vllm.LABEL_REASON)
        return timeseries(
            Spec("Admission rejections", "Requests vLLM turned away at its queue limits, by "
                 "reason (--max-num-queued-reqs, --max-num-queued-tokens; vLLM 0.32 and "
                 "later). vLLM has no such limit unless one is set, and still counts zero.",
                 "reqps", width=8),
            [Query(sum_by((vllm.LABEL_REASON,), _rate(vllm.ADMISSION_REJECTIONS)), reason)],
            bars=True)
    classes = spec.classes.declared
    return timeseries(
        Spec("Admission rejections", "Requests turned away by the service's bounded admission "
             "queue (429 when full, 503 after waiting too long), by reason"
             + (", and by request class (shed: a waiting request gave its place to a higher "
                "class)." if classes else "."), "reqps", width=8),
        [Query(sum_by((m.LABEL_REASON, *_by_class(spec)),
                      _rate(m.ADMISSION_REJECTIONS, _service_scope(spec))),
               " ".join(ref(label) for label in (m.LABEL_REASON, *_by_class(spec))))],
        bars=True)


def _throughput_row(spec: SloSpec, series: ServerSeries, board: Board) -> None:
    board.row("Throughput")
    board.panel(timeseries(
        Spec("Token throughput", "Prompt tokens prefilled and tokens generated per second.",
             "tps", width=8),
        [Query(sum_by((), _rate(vllm.PROMPT_TOKENS)), "prompt"),
         Query(sum_by((), _rate(vllm.GENERATION_TOKENS)), "generation")]))
    by = (*series.requests_by, *_by_class(spec))
    grouped = (" (vLLM groups them: 2xx, 4xx, 5xx; handler \"none\" is a path no route "
               "matched)" if series.stock_vllm else "")
    board.panel(timeseries(
        Spec("Requests by status", "Finished HTTP requests per second by route and status code"
             + grouped + "." + counted_against(spec, series.requests), "reqps", width=8),
        [Query(sum_by(by, _rate(series.requests, _service_scope(spec))),
               " ".join(ref(label) for label in by))],
        stacked=True))
    board.panel(_rejections(spec, series))


def prefix_cache_panel(option: PrefixCacheAlert) -> ts_builder.Panel:
    """The hit ratio, and the VllmPrefixCacheHitRatioLow alert's threshold: a dashed line at a
    fixed floor, or (relative) a series of its own: a share of the ratio's recent median.

    That series is not dashed: Grafana dashes a series through a field override, whose matcher
    options the dashboard schema Governor validates against does not accept as Grafana writes
    them (a string), so its legend says what it is."""
    ratio = ratio_of_rates(_series(vllm.PREFIX_CACHE_HITS.total),
                           _series(vllm.PREFIX_CACHE_QUERIES.total), RATE_INTERVAL)
    about = ("Prompt tokens found in the prefix cache over prompt tokens looked up: shared "
             "system prompts make prefill cheaper. The VllmPrefixCacheHitRatioLow alert's "
             "threshold (a ticket, for each engine looking up at least "
             f"{format_number(option.min_queried_tokens_per_second)} tokens a second)")
    queries = [Query(ratio, "hit ratio")]
    if option.below is not None:
        return timeseries(Spec("Prefix-cache hit ratio", f"{about}, dashed: a fixed floor.",
                               "percentunit", width=8), queries,
                          lines=[Line(option.below)], max_value=1)
    share = format_number(option.below_baseline or 0)
    baseline = format_duration(option.baseline_seconds)
    # ">= 0" leaves out the moments nothing was looked up (0/0): they have no ratio.
    queries.append(Query(f"{share} * quantile_over_time(0.5, (\n{ratio}\n>= 0\n)"
                         f"[{baseline}:{PREFIX_CACHE_BASELINE_STEP}])",
                         f"alert below ({share} of the {baseline} median)"))
    return timeseries(Spec("Prefix-cache hit ratio", f"{about}, the alert-below line: {share} "
                           "times the ratio's "
                           f"median over the last {baseline}, here of the engines shown "
                           "together; the alert measures each engine against its own median "
                           "while it was that busy.",
                           "percentunit", width=8), queries, max_value=1)


def _scheduler_row(spec: SloSpec, series: ServerSeries, board: Board) -> None:
    board.row("Scheduler and KV cache")
    queues = [Query(sum_by((), _series(vllm.NUM_REQUESTS_RUNNING.name)), "running"),
              Query(sum_by((), _series(vllm.NUM_REQUESTS_WAITING.name)), "waiting (engine)")]
    if not series.stock_vllm:
        queues.append(Query(sum_by((), _series(m.QUEUE_DEPTH.name)), "admission queue"))
    board.panel(timeseries(
        Spec("Running and waiting", "Requests in the engine's running batch and its waiting "
             "queue" + ("." if series.stock_vllm else ", and the service's own admission queue "
                        "in front of it."), "short", width=8), queues))
    board.panel(timeseries(
        Spec("KV cache usage", "Share of KV-cache blocks in use; near full, vLLM preempts "
             "requests. Dashed: the KvCacheNearFull alert's threshold.", "percentunit", width=8),
        [Query(_series(vllm.KV_CACHE_USAGE.name).render(), "{{instance}}")],
        lines=[Line(KV_NEAR_FULL)], max_value=1))
    board.panel(prefix_cache_panel(spec.alerting.prefix_cache))
    board.panel(timeseries(
        Spec("Preemptions", "Requests evicted from the running batch for lack of KV cache; "
             "each recomputes its prefill.", "short", width=8),
        [Query(sum_by((), _rate(vllm.NUM_PREEMPTIONS)), "preemptions/s")], bars=True))
    board.panel(timeseries(
        Spec("Tokens per engine step", "Tokens vLLM counts per engine step "
             f"({vllm.ITERATION_TOKENS.name}), beside the requests running. A step that only "
             "decodes counts one token per running request, so the median sits near the "
             "running line. vLLM counts a prompt whole at the step its prefill ends, even when "
             "chunked prefill spread it over steps each within max_num_batched_tokens: the "
             "upper quantiles are prompt lengths and may exceed that budget, which they are "
             "not measured against (the budget in force: max_num_batched_tokens, in the "
             "Batching limits row).", "short",
             width=8),
        [*(Query(histogram_quantile(q, vllm.ITERATION_TOKENS.name, LABELS, RATE_INTERVAL),
                 f"p{format_number(q * 100)}") for q in (0.5, 0.99)),
         Query(aggregate("avg", (), _series(vllm.NUM_REQUESTS_RUNNING.name)),
               "requests running (mean of targets)")]))
    board.panel(timeseries(
        Spec("Finished requests by reason", "Why requests ended: stop, length, abort, error.",
             "reqps", width=8),
        [Query(sum_by((vllm.LABEL_FINISHED_REASON,), _rate(vllm.REQUEST_SUCCESS)),
               f"{ref(vllm.LABEL_FINISHED_REASON)}")], stacked=True))


def _features_row(board: Board) -> None:
    """vLLM's optional features, each drawn where the running vLLM has it switched on."""
    board.row("vLLM features")
    accepted = _rate(vllm.SPEC_DECODE_ACCEPTED_TOKENS)
    by = (LABEL_INSTANCE,)
    board.panel(timeseries(
        Spec("Speculative decoding acceptance", "Share of draft tokens the target model "
             "accepted (vllm:spec_decode_*, with --speculative-config; empty without). A "
             "falling share means drafts cost verification time without saving steps.",
             "percentunit", width=8),
        [Query(ratio_of_rates(Selector(vllm.SPEC_DECODE_ACCEPTED_TOKENS.total, LABELS),
                              Selector(vllm.SPEC_DECODE_DRAFT_TOKENS.total, LABELS),
                              RATE_INTERVAL, by), f"accepted {ref(LABEL_INSTANCE)}")],
        max_value=1))
    board.panel(timeseries(
        Spec("Tokens per draft", "Mean accepted tokens per draft, plus the one token the "
             "target model adds: the tokens each verification step yields (1 = drafting "
             "gains nothing).", "short", width=8),
        [Query(f"1 + {sum_by(by, accepted)} / {sum_by(by, _rate(vllm.SPEC_DECODE_DRAFTS))}",
               f"tokens per step {ref(LABEL_INSTANCE)}")]))
    board.panel(stat(
        Spec("LoRA adapters", "Adapters running and waiting on each server, and the most it "
             "holds at once (vllm:lora_requests_info, with --enable-lora; empty without). "
             "vLLM keeps a series per state it has seen, valued at the time it last held: "
             "the newest is the current one.", "short", width=8, height=8),
        Query(f"topk by ({LABEL_INSTANCE}) (1, {_series(vllm.LORA_REQUESTS_INFO.name)})",
              f"{ref(LABEL_INSTANCE)} running: {ref(vllm.LABEL_RUNNING_LORA)} waiting: "
              f"{ref(vllm.LABEL_WAITING_LORA)} (max {ref(vllm.LABEL_MAX_LORA)})",
              instant=True), text_mode=NAME_ONLY, no_value="LoRA off"))
    versions = (LABEL_INSTANCE, rt.LABEL_VLLM_VERSION, rt.LABEL_TORCH_VERSION,
                rt.LABEL_TORCH_CUDA_VERSION)
    board.panel(stat(
        Spec("Versions", "vLLM, torch and the CUDA torch was built for, on each server "
             f"({rt.RUNTIME_INFO.series}, from governor serve or Governor's middleware in "
             "vllm serve; none: not installed, or a CPU build). The driver and the CUDA it "
             "supports are on the GPU board.", "short", width=24, height=4),
        Query(f"count by ({', '.join(versions)}) ({_series(rt.RUNTIME_INFO.series)})",
              f"{ref(LABEL_INSTANCE)}: vLLM {ref(rt.LABEL_VLLM_VERSION)}, torch "
              f"{ref(rt.LABEL_TORCH_VERSION)}, CUDA {ref(rt.LABEL_TORCH_CUDA_VERSION)}",
              instant=True), text_mode=NAME_ONLY))


def _limit_queries(spec: SloSpec, series: ServerSeries, param: str) -> list[Query]:
    """In force, floor and ceiling: the service's own gauges, or on stock vLLM (which exports
    none) the controller's, as it last read each target (``target`` is the instance)."""
    if not series.stock_vllm:
        knob = eq(m.LABEL_PARAM, param)
        return [Query(_series(m.BATCHING_LIMIT.name, knob).render(), "in force {{instance}}"),
                Query(_series(m.BATCHING_FLOOR.name, knob).render(), "floor {{instance}}"),
                Query(_series(m.BATCHING_CEILING.name, knob).render(), "ceiling {{instance}}")]
    read = (*spec.targets.controller.matchers(),
            regex(c.LABEL_TARGET, variable(LABEL_INSTANCE)), eq(c.LABEL_PARAM, param))
    legend = ref(c.LABEL_TARGET)
    return [Query(Selector(c.TARGET_LIMITS.name, read).render(), f"in force {legend}"),
            Query(Selector(c.TARGET_FLOOR.name, read).render(), f"floor {legend}"),
            Query(Selector(c.TARGET_CEILING.name, read).render(), f"ceiling {legend}")]


def _limits_row(spec: SloSpec, series: ServerSeries, board: Board) -> None:
    board.row("Batching limits")
    read = (" On stock vLLM, which exports no limits, as the controller last read them from "
            "each target's admin route." if series.stock_vllm else "")
    for param, about in ((m.PARAM_MAX_NUM_BATCHED_TOKENS, "Per-step token budget: prefill "
                          "chunks beyond it wait, so decode steps stay short."),
                         (m.PARAM_MAX_NUM_SEQS, "Running-request cap: each sequence adds "
                          "KV reads to every decode step.")):
        board.panel(timeseries(
            Spec(param, f"{about} The controller moves it between the floor and the start-up "
                 f"ceiling.{read}", "short"), _limit_queries(spec, series, param)))


def _cold_start_row(series: ServerSeries, board: Board) -> None:
    board.row("Cold start")
    if series.stock_vllm:
        board.panel(text(f"Cold start: {NOT_ON_STOCK_VLLM.lower()}", (
            f"**{NOT_ON_STOCK_VLLM}.**\n\n`governor serve` records how long its engine took "
            "to start and its warm-up requests took, before `/health` answers 200.\nFor "
            "stock vLLM, a startup probe that sends a request keeps a new pod out of the "
            "Service until it has served one (docs/deploy.md)."), height=4))
        return
    board.panel(timeseries(
        Spec("Start-up time", "Seconds each replica's start took, by phase: the engine's start "
             "(weights, compilation, KV cache) and the warm-up requests sent before /health "
             "answers 200 (--warmup). A replica that scaled out appears as new series; its "
             "sum is the cold start a scale-out waits for, beside the pod's scheduling and "
             "image pull.", "s"),
        [Query(_series(m.STARTUP.name).render(), f"{{{{{m.LABEL_PHASE}}}}} {{{{instance}}}}")],
        stacked=True))
    board.panel(timeseries(
        Spec("Warm-up first token", "Slowest time to first token of the warm-up's first round, "
             "on a cold engine, and of its last: what the first client requests would have "
             "waited without the warm-up, and what they wait with it. None of these requests "
             "counts in the service's latency series.", "s"),
        [Query(_series(m.WARMUP_FIRST_TOKEN.name).render(),
               f"{{{{{m.LABEL_ROUND}}}}} round {{{{instance}}}}")]))


def inference_board(spec: SloSpec, source: str) -> Board:
    board = Board(INFO, source)
    series = series_of(spec)
    fleet_variables(board, spec.targets.inference, series.ready.name)
    if spec.classes.declared:
        board.variable(label_variable(m.LABEL_CLASS, m.LABEL_CLASS, m.REQUESTS.total,
                                      title="Request class"))
    controller = spec.targets.controller
    board.annotation(controller_events.decisions(controller))
    board.annotation(controller_events.limit_changes(controller))
    board.annotation(controller_events.controller_posts())
    _latency_row(spec, series, board)
    _heatmap_row(spec, series, board)
    _stages_row(spec, series, board)
    _throughput_row(spec, series, board)
    cost_row(spec, board)
    _scheduler_row(spec, series, board)
    _limits_row(spec, series, board)
    _cold_start_row(series, board)
    probe_row(board)
    _features_row(board)
    return board


def build(spec: SloSpec, source: str) -> dm.Dashboard:
    return inference_board(spec, source).build()
