"""The controller's actions as annotations, read from Prometheus.

compose.yaml runs Grafana without an API token for the controller, so the boards cannot rely on
the controller posting annotations; the controller's own series say the same thing. Where the
controller does have a token (``--grafana-url``), its posts carry :data:`CONTROLLER_TAG` and
show through :func:`controller_posts`.
"""

from __future__ import annotations

from typing import Final

from grafana_foundation_sdk.builders import dashboard as db

from governor.contracts.metrics import controller as c
from governor.contracts.promql import Selector, changes, ne, new_or_increased
from governor.dashboards.board import PrometheusAnnotation, tagged_annotations
from governor.dashboards.variables import ref
from governor.slo.fleet import Target

# The tag controller.grafana puts on every annotation it posts.
CONTROLLER_TAG: Final = c.ANNOTATION_TAG
# The controller's "nothing to do" action (controller.model.Action.HOLD; a test pins it): holds
# happen every reconcile and would bury the real changes.
HOLD_ACTION: Final = "hold"
# Long enough to hold two samples at the default 15 s scrape interval and the 1 m step below.
WINDOW: Final = "2m"
STEP: Final = "1m"


def decisions(controller: Target) -> PrometheusAnnotation:
    """``controller``: the spec's target for the controller's series (any board shows these)."""
    changes_made = Selector(c.DECISIONS.total,
                            (*controller.matchers(), ne(c.LABEL_ACTION, HOLD_ACTION)))
    return PrometheusAnnotation(
        "Controller decisions",
        new_or_increased(changes_made, (c.LABEL_ACTION, c.LABEL_REASON), WINDOW),
        color="purple", title_format=f"controller: {ref(c.LABEL_ACTION)}",
        text_format=f"reason: {ref(c.LABEL_REASON)}",
        tag_keys=f"{c.LABEL_ACTION},{c.LABEL_REASON}", step=STEP)


def limit_changes(controller: Target) -> PrometheusAnnotation:
    return PrometheusAnnotation(
        "Batching limit changes",
        f"{changes(Selector(c.TARGET_LIMITS.name, controller.matchers()), WINDOW)} > 0",
        color="orange", title_format=f"{ref(c.LABEL_PARAM)} changed",
        text_format=f"target {ref(c.LABEL_TARGET)}",
        tag_keys=f"{c.LABEL_PARAM},{c.LABEL_TARGET}", step=STEP)


def controller_posts() -> db.AnnotationQuery:
    return tagged_annotations("Controller (posted to Grafana)", CONTROLLER_TAG, "blue")
