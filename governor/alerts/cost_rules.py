"""Energy and cost per token (``cost.yml``): joules per output token, output tokens per joule and
the cost of a million input and output tokens, per inference target and model and per model.

The join: a GPU belongs to the inference targets on its node (the ``node`` label where the
scrape configuration sets one, else the host part of ``instance``, as the verdict places them:
:func:`governor.alerts.verdict_inputs.placed`). A node's GPU energy (Governor's
``gpu_energy_joules_total``, or dcgm-exporter's energy counter under each release's name) and,
with ``cost.gpu_hour_price`` in the spec, its GPUs' price by the hour are charged to the targets
and models on the node in proportion to the output tokens each generated over the window
(vLLM's ``vllm:generation_tokens_total``, which governor serve and stock vLLM both export). A
million input tokens cost the whole charge over the input tokens, a million output tokens the
whole charge over the output tokens: each is what that kind of token would have to pay alone::

    rules = cost_rules(spec)       # node, target and model rules, in evaluation order
"""

from __future__ import annotations

from fractions import Fraction
from typing import Final

from governor.alerts.health_alert import MINUTE, by_target, scraped, series
from governor.alerts.rules import RecordingRule, RuleGroup
from governor.alerts.ruletests import ExprCheck, InputSeries, RuleTest
from governor.alerts.verdict_inputs import placed
from governor.contracts.endpoints import EXPORTER, INFERENCE
from governor.contracts.metrics import cost as c
from governor.contracts.metrics import dcgm, gpu, vllm
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.metrics.verdict import LABEL_NODE
from governor.contracts.promql import Selector, equal_to, format_number, max_by, rate, sum_by
from governor.slo.fleet import Targets
from governor.slo.spec import SloSpec

GROUP: Final = "governor-cost"
SECONDS_PER_HOUR: Final = 3600
MILLION: Final = 1_000_000
NODE: Final = (LABEL_NODE,)
# One GPU of a dcgm-exporter: under MIG, dcgm-exporter repeats the GPU's energy and temperature
# on each GPU instance's series (labels GPU_I_PROFILE, GPU_I_ID); the GPU counts once.
DCGM_GPU: Final = (LABEL_NODE, LABEL_INSTANCE, dcgm.LABEL_GPU)


def _node_power(targets: Targets) -> str:
    gpus = targets.gpu
    if gpus.dcgm:
        joules = dcgm.ENERGY.base(gpus.matchers(), lambda s: rate(s, c.WINDOW))
        return sum_by(NODE, max_by(DCGM_GPU, placed(joules)))
    joules = rate(Selector(gpu.ENERGY.total, gpus.matchers()), c.WINDOW)
    return sum_by(NODE, placed(joules))


def _node_gpus(targets: Targets) -> str:
    gpus = targets.gpu
    if gpus.dcgm:
        present = max_by(DCGM_GPU, placed(dcgm.PRESENCE.base(gpus.matchers())))
    else:
        present = placed(Selector(gpu.UP.name, gpus.matchers()).render())
    return f"count by ({LABEL_NODE}) ({present})"


def _charged(spec: SloSpec, per_node: str) -> str:
    """``per_node`` (one series per node) shared among the targets and models on the node by
    their output tokens."""
    out = Selector(c.recorded(c.OUTPUT_TOKENS, c.LEVEL_TARGET), spec.targets.inference.matchers())
    share = (f"{placed(out.render())}\n/ on ({LABEL_NODE}) group_left ()\n"
             f"({c.NODE_OUTPUT_TOKENS} > 0)\n* on ({LABEL_NODE}) group_left ()\n{per_node}")
    return sum_by(_per_target(spec), f"\n{share}\n")


def _per_target(spec: SloSpec) -> tuple[str, ...]:
    """A target's labels, its model, and its ``node`` where the scrape gives one (kept so the
    target's series still know their node)."""
    return (*by_target(spec.targets.inference, vllm.LABEL_MODEL), LABEL_NODE)


def _at(spec: SloSpec, quantity: str, level: str) -> str:
    matchers = spec.targets.inference.matchers() if level == c.LEVEL_TARGET else ()
    return Selector(c.recorded(quantity, level), matchers).render()


def _results(spec: SloSpec, level: str) -> list[RecordingRule]:
    """The four answers at ``level`` from its tokens, watts and cost."""
    def at(quantity: str) -> str:
        return _at(spec, quantity, level)

    # A target's charge knows its node (placed); its tokens only where the scrape gave one.
    per = f"/ ignoring ({LABEL_NODE})" if level == c.LEVEL_TARGET else "/"

    rules = [
        RecordingRule(c.recorded(c.JOULES_PER_OUTPUT_TOKEN, level),
                      f"{at(c.WATTS)}\n{per}\n({at(c.OUTPUT_TOKENS)} > 0)"),
        RecordingRule(c.recorded(c.OUTPUT_TOKENS_PER_JOULE, level),
                      f"{at(c.OUTPUT_TOKENS)}\n{per}\n({at(c.WATTS)} > 0)"),
    ]
    if spec.cost.gpu_hour_price is not None:
        rules += [
            RecordingRule(c.recorded(quantity, level),
                          f"{at(c.COST_PER_SECOND)}\n{per}\n({at(tokens)} > 0) * {MILLION}")
            for quantity, tokens in ((c.COST_PER_MILLION_INPUT, c.INPUT_TOKENS),
                                     (c.COST_PER_MILLION_OUTPUT, c.OUTPUT_TOKENS))
        ]
    return rules


def cost_rules(spec: SloSpec) -> tuple[RecordingRule, ...]:
    """Per node, then per target and model, then per model; each reads only those above it."""
    inference = spec.targets.inference.matchers()
    per_target = _per_target(spec)

    def tokens(counter: str) -> str:
        return sum_by(per_target, rate(Selector(counter, inference), c.WINDOW))

    def per_model(quantity: str) -> RecordingRule:
        return RecordingRule(c.recorded(quantity, c.LEVEL_MODEL),
                             sum_by((vllm.LABEL_MODEL,), _at(spec, quantity, c.LEVEL_TARGET)))

    out = Selector(c.recorded(c.OUTPUT_TOKENS, c.LEVEL_TARGET), inference)
    rules = [
        RecordingRule(c.NODE_WATTS, _node_power(spec.targets)),
        RecordingRule(c.NODE_GPUS, _node_gpus(spec.targets)),
        RecordingRule(c.recorded(c.OUTPUT_TOKENS, c.LEVEL_TARGET),
                      tokens(vllm.GENERATION_TOKENS.total)),
        RecordingRule(c.recorded(c.INPUT_TOKENS, c.LEVEL_TARGET),
                      tokens(vllm.PROMPT_TOKENS.total)),
        RecordingRule(c.NODE_OUTPUT_TOKENS, sum_by(NODE, placed(out.render()))),
        RecordingRule(c.recorded(c.WATTS, c.LEVEL_TARGET), _charged(spec, c.NODE_WATTS)),
    ]
    price = spec.cost.gpu_hour_price
    if price is not None:
        rules.append(RecordingRule(
            c.recorded(c.COST_PER_SECOND, c.LEVEL_TARGET),
            _charged(spec, f"({c.NODE_GPUS} * {format_number(price)} / {SECONDS_PER_HOUR})")))
    rules += _results(spec, c.LEVEL_TARGET)
    summed = [c.OUTPUT_TOKENS, c.INPUT_TOKENS, c.WATTS]
    if price is not None:
        summed.append(c.COST_PER_SECOND)
    rules += [per_model(quantity) for quantity in summed]
    rules += _results(spec, c.LEVEL_MODEL)
    return tuple(rules)


def cost_group(spec: SloSpec) -> RuleGroup:
    return RuleGroup(GROUP, cost_rules(spec))


# ---- the promtool test: known inputs, answers computed by hand ----------------------------------

CHECK_MINUTE: Final = 10
TOLERANCE: Final = "1e-9"
# Two nodes. node-0: two GPUs drawing 400 W and 240 W, one engine (model m) generating 40 output
# and reading 160 input tokens a second. node-1: one GPU at 200 W shared by two engines, model m
# (20 out, 80 in) and model n (20 out, 10 in), so each is charged half of it. Under dcgm-exporter,
# node-1's GPU runs in MIG mode: two GPU instances, each repeating its energy and temperature.
GPUS: Final = (("node-0", 0, 400), ("node-0", 1, 240), ("node-1", 0, 200))
ENGINES: Final = (("node-0", 0, "m", 40, 160), ("node-1", 1, "m", 20, 80),
                  ("node-1", 2, "n", 20, 10))


Row = tuple[Fraction, Fraction, Fraction, Fraction]  # watts, GPU-hours an hour, out, in


def _expected(price: Fraction | None) -> dict[tuple[str, str, str, str], Fraction]:
    """(quantity, level, target or "", model) → each answer, worked out by hand from the
    inputs above: node-0 charges its 640 W and two GPU-hours an hour to engine 0; node-1 halves
    its 200 W and one GPU-hour an hour between engines 1 and 2 (equal output tokens)."""
    watts = {0: Fraction(640), 1: Fraction(100), 2: Fraction(100)}
    gpu_hours = {0: Fraction(2), 1: Fraction(1, 2), 2: Fraction(1, 2)}
    found: dict[tuple[str, str, str, str], Fraction] = {}
    rows: dict[tuple[str, str, str], Row] = {
        (c.LEVEL_TARGET, str(n), model): (watts[n], gpu_hours[n], Fraction(o), Fraction(i))
        for _, n, model, o, i in ENGINES}
    for model in ("m", "n"):
        mine = [row for key, row in rows.items() if key[2] == model]
        rows[(c.LEVEL_MODEL, "", model)] = (sum((r[0] for r in mine), Fraction(0)),
                                            sum((r[1] for r in mine), Fraction(0)),
                                            sum((r[2] for r in mine), Fraction(0)),
                                            sum((r[3] for r in mine), Fraction(0)))
    for (level, target, model), (w, hours, out, inp) in rows.items():
        found[(c.JOULES_PER_OUTPUT_TOKEN, level, target, model)] = w / out
        found[(c.OUTPUT_TOKENS_PER_JOULE, level, target, model)] = out / w
        if price is not None:
            per_second = hours * price / SECONDS_PER_HOUR
            found[(c.COST_PER_MILLION_OUTPUT, level, target, model)] = \
                per_second / out * MILLION
            found[(c.COST_PER_MILLION_INPUT, level, target, model)] = \
                per_second / inp * MILLION
    return found


def _node_label(node: str) -> dict[str, str]:
    """node-0's series carry no node label (placed by their instance's host, as on one
    machine); node-1's carry it (as the Kubernetes monitors set it)."""
    return {} if node == "node-0" else {LABEL_NODE: node}


def _engine(node: str, index: int) -> str:
    return INFERENCE.address(node if node == "node-0" else f"inference-{index}")


def _inputs(spec: SloSpec) -> list[InputSeries]:
    targets = spec.targets
    inputs = []
    for node, index, watts in GPUS:
        exporter = {**scraped(targets.gpu, EXPORTER.address(node)), **_node_label(node),
                    gpu.LABEL_GPU: str(index)}
        if targets.gpu.dcgm:  # node-0 under 4.8's names (millijoules), node-1 under 4.9's
            release = dcgm.RELEASE_4_8 if node == "node-0" else dcgm.RELEASE_4_9
            field = dcgm.ENERGY.in_release(release)
            presence = dcgm.PRESENCE.in_release(release)
            assert field is not None and presence is not None
            per_minute = int(watts * MINUTE / field.to_base)
            for labels in _dcgm_entities(node, exporter):
                inputs += [InputSeries(series(field.name, labels), f"0+{per_minute}x20"),
                           InputSeries(series(presence.name, labels), "40x20")]
        else:
            inputs += [InputSeries(series(gpu.ENERGY.total, exporter), f"0+{watts * MINUTE}x20"),
                       InputSeries(series(gpu.UP.name, exporter), "1x20")]
    for node, index, model, out, into in ENGINES:
        engine = {**scraped(targets.inference, _engine(node, index)), **_node_label(node),
                  vllm.LABEL_MODEL: model}
        inputs += [InputSeries(series(vllm.GENERATION_TOKENS.total, engine),
                               f"0+{out * MINUTE}x20"),
                   InputSeries(series(vllm.PROMPT_TOKENS.total, engine),
                               f"0+{into * MINUTE}x20")]
    return inputs


def _dcgm_entities(node: str, exporter: dict[str, str]) -> list[dict[str, str]]:
    """The GPU's series labels, or (node-1, in MIG mode) its two GPU instances'."""
    if node == "node-0":
        return [exporter]
    return [{**exporter, dcgm.LABEL_MIG_PROFILE: profile, dcgm.LABEL_MIG_INSTANCE: gi}
            for profile, gi in (("3g.71gb", "1"), ("1g.18gb", "2"))]


def cost_test(spec: SloSpec) -> RuleTest:
    price = (Fraction(str(spec.cost.gpu_hour_price)) if spec.cost.gpu_hour_price is not None
             else None)
    checks = []
    nodes = {str(index): node for node, index, *_ in ENGINES}
    for (quantity, level, index, model), value in sorted(_expected(price).items()):
        labels: dict[str, str] = {vllm.LABEL_MODEL: model}
        if level == c.LEVEL_TARGET:
            labels = {**scraped(spec.targets.inference, _engine(nodes[index], int(index))),
                      **labels}
        selector = Selector(c.recorded(quantity, level), equal_to(labels)).render()
        expr = f"abs({selector} - {float(value)!r}) < bool {TOLERANCE} * {float(value)!r}"
        checks.append(ExprCheck(CHECK_MINUTE * MINUTE, expr,
                                ((series("", labels) if labels else "{}", 1.0),)))
    return RuleTest("Energy and cost per token: known inputs, answers worked out by hand",
                    MINUTE, tuple(_inputs(spec)), (), tuple(checks))
