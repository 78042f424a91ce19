"""The series the energy and cost rules record (``cost.yml``), per inference target and model.

A GPU belongs to the inference targets on its node (the ``node`` label where the scrape config
sets one, else the host part of ``instance``); the energy of a node's GPUs, and their price by the
hour, are charged to the targets and models there in proportion to the output tokens each
generated. Rates are over :data:`WINDOW`::

    >>> recorded(JOULES_PER_OUTPUT_TOKEN, LEVEL_TARGET)
    'target:joules_per_output_token:rate5m'
"""

from __future__ import annotations

from typing import Final

from governor.contracts.metrics.verdict import LABEL_NODE

WINDOW: Final = "5m"
LEVEL_TARGET: Final = "target"  # per scrape target and model (job, instance, model_name)
LEVEL_MODEL: Final = "model"  # per model, over every target serving it


def recorded(quantity: str, level: str) -> str:
    """The name of ``quantity`` recorded at ``level``."""
    return f"{level}:{quantity}:rate{WINDOW}"


# Per node: the GPUs' power (joules a second) and count, and the output tokens of the engines there.
NODE_WATTS: Final = f"{LABEL_NODE}:gpu_energy_watts:rate{WINDOW}"
NODE_GPUS: Final = f"{LABEL_NODE}:gpus:count"
NODE_OUTPUT_TOKENS: Final = f"{LABEL_NODE}:output_tokens_per_second:rate{WINDOW}"
# Per target and model: tokens a second, the energy and the cost charged to it.
OUTPUT_TOKENS: Final = "output_tokens_per_second"
INPUT_TOKENS: Final = "input_tokens_per_second"
WATTS: Final = "gpu_energy_watts"
COST_PER_SECOND: Final = "gpu_cost_per_second"
# What the board and docs show, per target and per model.
JOULES_PER_OUTPUT_TOKEN: Final = "joules_per_output_token"
OUTPUT_TOKENS_PER_JOULE: Final = "output_tokens_per_joule"
COST_PER_MILLION_INPUT: Final = "cost_per_million_input_tokens"
COST_PER_MILLION_OUTPUT: Final = "cost_per_million_output_tokens"
ENERGY_RESULTS: Final = (JOULES_PER_OUTPUT_TOKEN, OUTPUT_TOKENS_PER_JOULE)
COST_RESULTS: Final = (COST_PER_MILLION_INPUT, COST_PER_MILLION_OUTPUT)
# Every name the rules may record (the cost ones only with a price in the spec).
RECORDED: Final = frozenset({
    NODE_WATTS, NODE_GPUS, NODE_OUTPUT_TOKENS,
    *(recorded(quantity, level)
      for quantity in (OUTPUT_TOKENS, INPUT_TOKENS, WATTS, COST_PER_SECOND, *ENERGY_RESULTS,
                       *COST_RESULTS)
      for level in (LEVEL_TARGET, LEVEL_MODEL))})
