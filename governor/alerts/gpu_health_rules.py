"""Each GPU's state, HEALTHY / WARN / CRITICAL, recorded with its reasons (``health.yml``), and
the two alerts of a GPU that holds more than its engine: a process count that stays high, and a
process whose memory grows while its engine serves nothing.

The reasons come from the signals the health alerts already read (lost, XID, uncorrected ECC,
row remapping, thermal and power throttling) and the two above, on the exporter the spec names;
dcgm-exporter reports no process, so its GPUs never carry those two (docs/dcgm.md)::

    group = state_group(spec.targets, spec.alerting.gpu_health)
    # gpu:health_reason:severity{gpu="1", reason="thermal_throttle"} 1
    # gpu:health:state{gpu="1"} 1

A GPU's process memory belongs to the engine on its node (the ``node`` label, else the host
part of ``instance``: :func:`governor.alerts.verdict_inputs.placed`), so the idle test reads
that engine's running requests.
"""

from __future__ import annotations

from typing import Final

from governor.alerts import dcgm_rules
from governor.alerts.health_alert import (
    BREAKS_AT,
    MINUTE,
    WINDOW,
    HealthAlert,
    Values,
    breaks,
    by_target,
    disappears,
    scraped,
    series,
    steady,
)
from governor.alerts.rules import RecordingRule, RuleGroup
from governor.alerts.ruletests import ExprCheck, InputSeries, RuleTest
from governor.alerts.verdict_inputs import placed
from governor.contracts.endpoints import EXPORTER, INFERENCE
from governor.contracts.metrics import dcgm, gpu, vllm
from governor.contracts.metrics import gpu_health as h
from governor.contracts.metrics.slo import SEVERITY_TICKET
from governor.contracts.metrics.verdict import LABEL_NODE
from governor.contracts.promql import (
    Selector,
    aggregate,
    format_duration,
    format_number,
    max_by,
    max_over_time,
    new_or_increased,
    one_of,
)
from governor.slo.fleet import GpuHealth, GpuTarget, Target, Targets

GROUP: Final = "governor-gpu-health"
Reasons = tuple[tuple[str, str], ...]  # (reason, PromQL that holds per GPU while it is in force)


def _on(gpus: Target, metric: str) -> Selector:
    return Selector(metric, gpus.matchers())


def processes_high(gpus: GpuTarget, option: GpuHealth) -> str:
    """More compute processes than the spec allows, at every sample of the window."""
    window = format_duration(option.processes_seconds)
    return (f"min_over_time({_on(gpus, gpu.PROCESS_COUNT.name)}[{window}]) > "
            f"{option.max_processes}")


def grows_while_idle(targets: Targets, option: GpuHealth) -> str:
    """A process, older than the window, whose memory grew by more than the spec's bytes over
    it, while the engine on its node ran no request at any scrape of it."""
    gpus, window = targets.gpu, format_duration(option.idle_seconds)
    held = _on(gpus, gpu.PROCESS_MEMORY_USED.name)
    grown = (f"({held} - min_over_time({held}[{window}])) > "
             f"{format_number(option.idle_growth_bytes)}\nand {held} offset {window}")
    running = Selector(vllm.NUM_REQUESTS_RUNNING.name, targets.inference.matchers())
    idle = (f"max by ({LABEL_NODE}) ({placed(max_over_time(running, window))}) == 0")
    return max_by(by_target(gpus, gpu.LABEL_GPU),
                  f"\n{placed(f'({grown})')}\nand on ({LABEL_NODE})\n{idle}\n")


def _throttled(gpus: GpuTarget, reasons: tuple[str, ...]) -> str:
    selector = Selector(gpu.CLOCK_EVENT_ACTIVE.name,
                        (*gpus.matchers(), one_of(gpu.LABEL_REASON, reasons)))
    return f"{max_by(by_target(gpus, gpu.LABEL_GPU), selector)} == 1"


def governor_reasons(targets: Targets, option: GpuHealth) -> Reasons:
    gpus = targets.gpu
    per_gpu = by_target(gpus, gpu.LABEL_GPU)
    return (
        (h.REASON_LOST, f"{_on(gpus, gpu.UP.name)} == 0"),
        (h.REASON_XID, new_or_increased(_on(gpus, gpu.XID_ERRORS.total), per_gpu, WINDOW)),
        (h.REASON_ECC, new_or_increased(_on(gpus, gpu.ECC_UNCORRECTED_ERRORS.total), per_gpu,
                                        WINDOW)),
        (h.REASON_REMAP_FAILED, f"{_on(gpus, gpu.REMAPPED_ROWS_FAILURE.name)} == 1"),
        (h.REASON_REMAP_PENDING, f"{_on(gpus, gpu.REMAPPED_ROWS_PENDING.name)} == 1"),
        (h.REASON_THERMAL, _throttled(gpus, gpu.THERMAL_REASONS)),
        (h.REASON_POWER, _throttled(gpus, gpu.POWER_REASONS)),
        (h.REASON_PROCESSES, processes_high(gpus, option)),
        (h.REASON_IDLE_GROWTH, grows_while_idle(targets, option)),
    )


def dcgm_reasons(gpus: GpuTarget) -> Reasons:
    """The same from dcgm-exporter's fields; no process count and no memory per process there."""
    on, per_gpu = gpus.matchers(), by_target(gpus, dcgm.LABEL_GPU)
    bitmask = dcgm.CLOCK_EVENT_REASONS.base(on)

    def throttled(reasons: tuple[str, ...]) -> str:
        return f"{max_by(per_gpu, dcgm.any_reason(bitmask, reasons))} == 1"

    (ecc,) = dcgm.ECC_UNCORRECTED.fields
    return (
        (h.REASON_LOST, dcgm_rules.lost(gpus)),
        (h.REASON_XID, dcgm_rules.new_xid(gpus)),
        (h.REASON_ECC, new_or_increased(Selector(ecc.name, on), per_gpu, WINDOW)),
        (h.REASON_REMAP_FAILED, f"{dcgm.ROW_REMAP_FAILED.base(on)} == 1"),
        (h.REASON_REMAP_PENDING, f"{dcgm.ROW_REMAP_PENDING.base(on)} == 1"),
        (h.REASON_THERMAL, throttled(gpu.THERMAL_REASONS)),
        (h.REASON_POWER, throttled(gpu.POWER_REASONS)),
    )


def _known(gpus: GpuTarget) -> str:
    """Every GPU the exporter knows, lost ones included: the state's HEALTHY floor."""
    if gpus.dcgm:
        return dcgm_rules.seen_lately(gpus)
    return aggregate("group", by_target(gpus, gpu.LABEL_GPU), _on(gpus, gpu.UP.name))


def state_rules(targets: Targets, option: GpuHealth) -> tuple[RecordingRule, ...]:
    """One rule per reason, valued at its severity while it holds and 0 otherwise (so a board
    and a check see every reason of every GPU), then the state: the worst of them."""
    gpus = targets.gpu
    per_gpu = by_target(gpus, gpu.LABEL_GPU)
    rules = []
    for reason, holds in reasons(targets, option):
        # The reason is a static label: one rule per reason, each its own series.
        grouped = aggregate("group", per_gpu, "\n" + holds + "\n")
        rules.append(RecordingRule(h.REASON.name,
                                   f"{grouped} * {h.REASONS[reason]}\nor\n{_known(gpus)} * 0",
                                   {gpu.LABEL_REASON: reason}))
    return (*rules, RecordingRule(h.STATE.name, max_by(per_gpu, _on(gpus, h.REASON.name))))


def reasons(targets: Targets, option: GpuHealth) -> Reasons:
    """The reasons the spec's exporter can tell."""
    return dcgm_reasons(targets.gpu) if targets.gpu.dcgm else governor_reasons(targets, option)


def state_group(targets: Targets, option: GpuHealth) -> RuleGroup:
    return RuleGroup(GROUP, state_rules(targets, option))


# ---- the promtool scenario: a GPU in each state, each reason once --------------------------------

def _grows(base: float, per_minute: float) -> Values:
    return lambda last: (f"{format_number(base)}x{BREAKS_AT - 1} "
                         f"{format_number(base)}+{format_number(per_minute)}x{last - BREAKS_AT}")


def _starts(base: float, growth: float) -> Values:
    """A process that appears at minute 10 and grows once, as an engine allocates at start."""
    return lambda last: (f"_x{BREAKS_AT} {format_number(base)} "
                         f"{format_number(base + growth)}x{last - BREAKS_AT - 1}")


def _appears_at(minute: int, value: float) -> Values:
    return lambda last: f"_x{minute - 1} {format_number(value)}x{last - minute}"


def _steps_at(minute: int, before: float, after: float) -> Values:
    return lambda last: (f"{format_number(before)}x{minute - 1} "
                         f"{format_number(after)}x{last - minute}")


Scenario = tuple[tuple[str, Values], ...]
Expected = dict[int, tuple[tuple[str, int], ...]]  # gpu → (reason, severity) in force


def _governor_scenario(targets: Targets, option: GpuHealth, check: int
                       ) -> tuple[Scenario, Expected, dict[str, str]]:
    gpus = targets.gpu
    exporter = scraped(gpus, EXPORTER.address("exporter-0"))
    node = {LABEL_NODE: "node-0"}
    engine = {**scraped(targets.inference, INFERENCE.address("inference-0")), **node,
              vllm.LABEL_MODEL: "m"}

    def on(index: int, **more: str) -> dict[str, str]:
        return {**exporter, gpu.LABEL_GPU: str(index), **more}

    def event(reason: str) -> dict[str, str]:
        return {gpu.LABEL_REASON: reason}

    pid = {gpu.LABEL_PID: "4242", gpu.LABEL_CONTAINER: "", **node}
    growth = 2 * option.idle_growth_bytes  # a minute: over the threshold within one
    scenario: list[tuple[str, Values]] = [
        (series(vllm.NUM_REQUESTS_RUNNING.name, engine), steady(0)),
        *((series(gpu.UP.name, on(i)), steady(1)) for i in (0, 1, 3, 4)),
        (series(gpu.UP.name, on(2)), breaks(1, 0)),
        (series(gpu.PROCESS_COUNT.name, on(0)), steady(option.max_processes)),
        (series(gpu.PROCESS_COUNT.name, on(1)), breaks(1, option.max_processes + 1)),
        (series(gpu.PROCESS_MEMORY_USED.name, on(0, **pid)), steady(40e9)),
        (series(gpu.PROCESS_MEMORY_USED.name, on(1, **pid)), _grows(40e9, growth)),
        (series(gpu.CLOCK_EVENT_ACTIVE.name, on(0, **event(gpu.REASON_HW_THERMAL))), steady(0)),
        (series(gpu.CLOCK_EVENT_ACTIVE.name, on(1, **event(gpu.REASON_HW_THERMAL))),
         breaks(0, 1)),
        (series(gpu.CLOCK_EVENT_ACTIVE.name, on(2, **event(gpu.REASON_SW_POWER_CAP))),
         breaks(0, 1)),
        (series(gpu.REMAPPED_ROWS_PENDING.name, on(1)), breaks(0, 1)),
        (series(gpu.XID_ERRORS.total, on(3, **{gpu.LABEL_XID: "79"})), _appears_at(check - 2, 1)),
        (series(gpu.ECC_UNCORRECTED_ERRORS.total, on(0)), steady(0)),
        (series(gpu.ECC_UNCORRECTED_ERRORS.total, on(4)), _steps_at(check - 2, 0, 2)),
        (series(gpu.REMAPPED_ROWS_FAILURE.name, on(4)), breaks(0, 1)),
    ]
    expected: Expected = {
        0: (),
        1: ((h.REASON_IDLE_GROWTH, 1), (h.REASON_PROCESSES, 1), (h.REASON_REMAP_PENDING, 1),
            (h.REASON_THERMAL, 1)),
        2: ((h.REASON_LOST, 2), (h.REASON_POWER, 1)),
        3: ((h.REASON_XID, 2),),
        4: ((h.REASON_ECC, 2), (h.REASON_REMAP_FAILED, 2)),
    }
    return tuple(scenario), expected, exporter


def _dcgm_scenario(gpus: GpuTarget, check: int) -> tuple[Scenario, Expected, dict[str, str]]:
    scenario = dcgm_rules.Scenario(gpus)
    old, new = dcgm.RELEASE_4_8, dcgm.RELEASE_4_9
    bits = dcgm.REASON_BITS
    xid = {dcgm.LABEL_XID_CODE: "79", dcgm.LABEL_XID_MESSAGE: "GPU has fallen off the bus"}
    fields: list[tuple[str, Values]] = [
        scenario.up(0, steady(1)),
        *(scenario.field(dcgm.PRESENCE, i, new, steady(40)) for i in (0, 1, 3, 4)),
        scenario.field(dcgm.PRESENCE, 2, old, disappears(40)),
        scenario.field(dcgm.CLOCK_EVENT_REASONS, 0, new, steady(bits[gpu.REASON_GPU_IDLE])),
        scenario.field(dcgm.CLOCK_EVENT_REASONS, 1, new,
                       breaks(0, bits[gpu.REASON_HW_THERMAL])),
        scenario.field(dcgm.ROW_REMAP_PENDING, 1, new, breaks(0, 1)),
        scenario.field(dcgm.XID, 3, new, _appears_at(check - 2, 79), extra=xid),
        scenario.field(dcgm.ECC_UNCORRECTED, 4, new, _steps_at(check - 2, 0, 2)),
        scenario.field(dcgm.ROW_REMAP_FAILED, 4, old, breaks(0, 1)),
    ]
    expected: Expected = {
        0: (), 1: ((h.REASON_REMAP_PENDING, 1), (h.REASON_THERMAL, 1)),
        2: ((h.REASON_LOST, 2),), 3: ((h.REASON_XID, 2),),
        4: ((h.REASON_ECC, 2), (h.REASON_REMAP_FAILED, 2)),
    }
    return tuple(fields), expected, scenario.exporter[0]


def _checks(expected: Expected, exporter: dict[str, str], check: int,
            told: tuple[str, ...]) -> tuple[ExprCheck, ...]:
    def labels(index: int, **more: str) -> dict[str, str]:
        return {**exporter, gpu.LABEL_GPU: str(index), **more}

    def reason(index: int, name: str, severity: int) -> tuple[str, float]:
        return series(h.REASON.name, labels(index, **{gpu.LABEL_REASON: name})), float(severity)

    quiet = (
        ExprCheck((BREAKS_AT - 1) * MINUTE, h.STATE.name, tuple(
            (series(h.STATE.name, labels(i)), float(h.HEALTHY)) for i in sorted(expected))),
        ExprCheck((BREAKS_AT - 1) * MINUTE, h.REASON.name, tuple(
            reason(i, name, 0) for i in sorted(expected) for name in sorted(told))))
    states = ExprCheck(check * MINUTE, h.STATE.name, tuple(
        (series(h.STATE.name, labels(i)), float(max((s for _, s in found), default=h.HEALTHY)))
        for i, found in sorted(expected.items())))
    in_force = ExprCheck(check * MINUTE, h.REASON.name, tuple(
        reason(i, name, dict(found).get(name, 0))
        for i, found in sorted(expected.items()) for name in sorted(told)))
    return (*quiet, states, in_force)


def state_test(targets: Targets, option: GpuHealth) -> RuleTest:
    """The rules' promtool test: GPU 0 healthy, 1 WARN, 2-4 CRITICAL, each reason the
    exporter has once; all HEALTHY before anything breaks."""
    gpus = targets.gpu
    if gpus.dcgm:
        check = BREAKS_AT + 5
        scenario, expected, exporter = _dcgm_scenario(gpus, check)
    else:
        held = -(-max(option.processes_seconds, option.idle_seconds) // MINUTE)
        check = BREAKS_AT + held + 2
        scenario, expected, exporter = _governor_scenario(targets, option, check)
    last = check + 1
    return RuleTest(
        "GPU health: one state per GPU, the worst of its reasons", MINUTE,
        tuple(InputSeries(name, values(last)) for name, values in scenario), (),
        _checks(expected, exporter, check, tuple(name for name, _ in reasons(targets, option))))


# ---- the two alerts ------------------------------------------------------------------------------

def gpu_health_alerts(targets: Targets, option: GpuHealth) -> tuple[HealthAlert, ...]:
    """GpuProcessCountHigh and GpuMemoryGrowsWhileIdle, on Governor's exporter only."""
    if targets.gpu.dcgm:
        return ()
    gpus = targets.gpu
    exporter = scraped(gpus, EXPORTER.address("exporter-0"))
    gpu0, gpu1, gpu2 = ({**exporter, gpu.LABEL_GPU: str(i)} for i in (0, 1, 2))
    nodes = ({LABEL_NODE: "node-0"}, {LABEL_NODE: "node-1"})
    engines = [{**scraped(targets.inference, INFERENCE.address(f"inference-{n}")), **nodes[n],
                vllm.LABEL_MODEL: "m"} for n in (0, 1)]
    pid = {gpu.LABEL_PID: "4242", gpu.LABEL_CONTAINER: ""}
    growth = 2 * option.idle_growth_bytes
    window = -(-option.idle_seconds // MINUTE)
    count = _on(gpus, gpu.PROCESS_COUNT.name)
    return (
        HealthAlert(
            "GpuProcessCountHigh", SEVERITY_TICKET, option.processes_seconds,
            f"{max_by(by_target(gpus, gpu.LABEL_GPU), count)} > {option.max_processes}",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} runs more processes than it should",
            f"More than {option.max_processes} compute process(es) have held a context on the "
            f"GPU for {format_duration(option.processes_seconds)}: a leaked context that never "
            "exited, or a second tenant taking memory and SM time from the engine.",
            ((series(gpu.PROCESS_COUNT.name, gpu0), breaks(1, option.max_processes + 1)),
             (series(gpu.PROCESS_COUNT.name, gpu1), steady(option.max_processes))),
            (gpu0,),
        ),
        HealthAlert(
            "GpuMemoryGrowsWhileIdle", SEVERITY_TICKET, 0,
            grows_while_idle(targets, option),
            "A process on GPU {{ $labels.gpu }} of {{ $labels.instance }} grows while its "
            "engine is idle",
            f"A process's GPU memory grew by more than {_size(option.idle_growth_bytes)} over "
            f"{format_duration(option.idle_seconds)} while the engine on its node ran no "
            "request: memory that is never given back (a leak) will end in an out-of-memory "
            "error under load.",
            ((series(vllm.NUM_REQUESTS_RUNNING.name, engines[0]), steady(0)),
             (series(vllm.NUM_REQUESTS_RUNNING.name, engines[1]), steady(3)),
             (series(gpu.PROCESS_MEMORY_USED.name, {**gpu0, **pid, **nodes[0]}),
              _grows(40e9, growth)),
             (series(gpu.PROCESS_MEMORY_USED.name, {**gpu1, **pid, **nodes[1]}),
              _grows(40e9, growth)),
             # An engine starting beside the idle one: younger than the window, not a leak.
             (series(gpu.PROCESS_MEMORY_USED.name, {**gpu2, **pid, **nodes[0]}),
              _starts(40e9, growth))),
            (gpu0,),
            # A process younger than the window is never a leak: it fires once one window old.
            ((BREAKS_AT - 1, False), (max(BREAKS_AT + 2, window + 1), True)),
        ),
    )


def _size(size: int) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20)):
        if size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} bytes"

