"""``kubernetes.autoscaling``: the bounds and triggers of the example autoscalers.

``governor generate`` writes a KEDA ``ScaledObject`` and an ``autoscaling/v2`` HPA for the
inference Deployment, both on the controller's scale-out signal. This section bounds them and
adds triggers beside that signal::

    kubernetes:
      replicas: 2
      autoscaling:
        autoscaler: keda            # keda, hpa, or both (the default: two alternatives)
        min_replicas: 0             # default: kubernetes.replicas; 0 only with keda and demand
        max_replicas: 8             # default: 8, or replicas when that is more
        triggers:
          queue_length: 5           # waiting requests per replica
          gpu_utilization: 80%      # mean utilisation of the fleet's GPUs
        demand: 'envoy_cluster_upstream_rq_total{envoy_cluster_name="llm"}'

    >>> Autoscaling(min_replicas=0, autoscaler=KEDA, demand="x_total").scales_to_zero
    True
    >>> Autoscaling().bounds(replicas=3)
    (3, 8)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

KEDA: Final = "keda"
HPA: Final = "hpa"
BOTH: Final = "both"
AUTOSCALERS: Final = (KEDA, HPA, BOTH)
# The upper bound when the spec gives none: the examples' bound before the spec could set it.
DEFAULT_MAX_REPLICAS: Final = 8
# The extra triggers a spec may add beside the controller's scale-out signal.
QUEUE_LENGTH: Final = "queue_length"
GPU_UTILIZATION: Final = "gpu_utilization"
TRIGGERS: Final = (QUEUE_LENGTH, GPU_UTILIZATION)


@dataclass(frozen=True)
class Autoscaling:
    """What the example autoscalers scale between, and on what.

    ``min_replicas`` ``None`` is ``kubernetes.replicas``; ``max_replicas`` ``None`` is
    :data:`DEFAULT_MAX_REPLICAS`, or the minimum when that is more. ``queue_length``: waiting
    requests per replica (vLLM's ``vllm:num_requests_waiting``) above which to add replicas;
    ``gpu_utilization``: the mean utilisation ratio in (0, 1] of the fleet's GPUs to hold the fleet
    at. ``demand``: a counter selector of the requests sent to the fleet, counted outside its
    pods (a gateway's, a router's), which wakes a fleet scaled to zero.
    """

    autoscaler: str = BOTH
    min_replicas: int | None = None
    max_replicas: int | None = None
    queue_length: int | None = None
    gpu_utilization: float | None = None
    demand: str | None = None

    def bounds(self, replicas: int) -> tuple[int, int]:
        """``(min, max)`` replicas, the Deployment's ``replicas`` filling what is not given."""
        low = replicas if self.min_replicas is None else self.min_replicas
        high = max(low, DEFAULT_MAX_REPLICAS) if self.max_replicas is None else self.max_replicas
        return low, high

    @property
    def scales_to_zero(self) -> bool:
        return self.min_replicas == 0

    @property
    def keda(self) -> bool:
        """A KEDA ``ScaledObject`` is written."""
        return self.autoscaler in (KEDA, BOTH)

    @property
    def hpa(self) -> bool:
        """An ``autoscaling/v2`` HPA is written."""
        return self.autoscaler in (HPA, BOTH)
