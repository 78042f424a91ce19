"""The inference board's "Cost and energy" row: joules per output token, output tokens per
joule and the cost of a million input and output tokens, per target and model and per model,
from the rules of ``cost.yml`` (:mod:`governor.alerts.cost_rules` says how a node's GPUs are
charged to the engines on it). Without ``cost.gpu_hour_price`` in the spec, a text panel says
what to set in place of the two cost panels."""

from __future__ import annotations

from typing import Final

from governor.contracts.metrics import cost as c
from governor.contracts.metrics import vllm
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.promql import Selector
from governor.dashboards.board import Board
from governor.dashboards.panels import Query, Spec, text, timeseries
from governor.dashboards.variables import ref, scope
from governor.slo.spec import SloSpec

LABELS: Final = scope()
JOIN: Final = (
    "A node's GPUs (their energy counter, and their price by the hour) are charged to the "
    "engines on that node (the node label, else the host of instance) by their share of its "
    "output tokens over 5 minutes.")


def _queries(quantity: str) -> list[Query]:
    return [Query(Selector(c.recorded(quantity, c.LEVEL_TARGET), LABELS).render(),
                  f"{ref(LABEL_INSTANCE)} {ref(vllm.LABEL_MODEL)}"),
            Query(Selector(c.recorded(quantity, c.LEVEL_MODEL), ()).render(),
                  f"model {ref(vllm.LABEL_MODEL)}")]


def cost_row(spec: SloSpec, board: Board) -> None:
    board.row("Cost and energy")
    board.panel(timeseries(
        Spec("Energy per output token", f"Joules the GPUs spent per token generated, per "
             f"target and model and per model. {JOIN}", "joule", width=6),
        _queries(c.JOULES_PER_OUTPUT_TOKEN)))
    board.panel(timeseries(
        Spec("Output tokens per joule", f"Tokens generated per joule of GPU energy: higher is "
             f"more efficient. {JOIN}", "short", width=6),
        _queries(c.OUTPUT_TOKENS_PER_JOULE)))
    price = spec.cost.gpu_hour_price
    if price is None:
        board.panel(text(
            "Cost per million tokens",
            "Set `cost.gpu_hour_price` in `slo.yaml` (the price of one GPU hour) to see the "
            "cost of a million input and output tokens here.", width=12, height=8))
        return
    for title, quantity, kind in (
        ("Cost per million input tokens", c.COST_PER_MILLION_INPUT, "input"),
        ("Cost per million output tokens", c.COST_PER_MILLION_OUTPUT, "output"),
    ):
        board.panel(timeseries(
            Spec(title, f"What a million {kind} tokens cost at {price:g} a GPU hour "
                 f"(cost.gpu_hour_price, in its currency): the GPUs' whole charge over the "
                 f"{kind} tokens alone. {JOIN}", "short", width=6),
            _queries(quantity)))
