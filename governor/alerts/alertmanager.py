"""``alertmanager.yml``: the controller's webhook, placeholder page and ticket receivers,
page-inhibits-ticket, and grouping by SLO.

Alertmanager 0.25 takes ``url``, ``send_resolved``, ``http_config`` and ``max_alerts`` on a
webhook; ``url_file`` and ``timeout`` are newer and amtool 0.25 rejects them. The bearer token
is read from a file (``credentials_file``) so that it never sits in the configuration.
"""

from __future__ import annotations

from governor.contracts.endpoints import ALERTMANAGER, LISTEN_HOST, WEBHOOK_PATH
from governor.contracts.metrics import slo as n
from governor.contracts.metrics.scrape import LABEL_INSTANCE
from governor.contracts.metrics.service import LABEL_CLASS
from governor.contracts.promql import eq, format_duration, regex
from governor.generation.params import Endpoints, RenderParams
from governor.slo.fleet import Alerting

RECEIVER_CONTROLLER = "controller"
RECEIVER_PAGE = "page"
RECEIVER_TICKET = "ticket"

HEADER_NOTE = """\
# The page and ticket receivers are placeholders that notify nobody: give them
# pagerduty_configs, opsgenie_configs, slack_configs or email_configs for your team (by hand in
# a copy, or wrap this file), keeping their names so that the routes and inhibitions still apply.
"""


def controller_url(address: str) -> str:
    return f"http://{address}{WEBHOOK_PATH}"


def alertmanager_config(endpoints: Endpoints, params: RenderParams,
                        alerting: Alerting | None = None) -> dict[str, object]:
    """``alerting``: the spec's names for the severities the routes and inhibition match."""
    alerting = alerting or Alerting()
    control, page, ticket = (alerting.severity(s) for s in (
        n.SEVERITY_CONTROL, n.SEVERITY_PAGE, n.SEVERITY_TICKET))
    webhooks = [
        {"url": controller_url(address), "send_resolved": True, "max_alerts": 0,
         "http_config": {"authorization": {"type": "Bearer",
                                           "credentials_file": params.controller_token_file}}}
        for address in endpoints.controller
    ]
    return {
        "route": {
            "receiver": RECEIVER_TICKET,
            "group_by": ["alertname", n.LABEL_SLO, n.LABEL_SEVERITY],
            "group_wait": format_duration(params.group_wait_seconds),
            "group_interval": format_duration(params.group_interval_seconds),
            "repeat_interval": format_duration(params.repeat_interval_seconds),
            "routes": [
                {
                    "receiver": RECEIVER_CONTROLLER,
                    "matchers": [eq(n.LABEL_SEVERITY, control).render()],
                    # One notification per breaching instance: the controller acts per target.
                    "group_by": ["alertname", n.LABEL_SLO, LABEL_INSTANCE],
                    "group_wait": format_duration(params.control_group_wait_seconds),
                    "group_interval": format_duration(params.control_group_interval_seconds),
                    "repeat_interval": format_duration(params.control_repeat_interval_seconds),
                },
                {"receiver": RECEIVER_PAGE,
                 "matchers": [eq(n.LABEL_SEVERITY, page).render()]},
                {"receiver": RECEIVER_TICKET,
                 "matchers": [eq(n.LABEL_SEVERITY, ticket).render()],
                 "repeat_interval": format_duration(params.ticket_repeat_interval_seconds)},
            ],
        },
        "inhibit_rules": [
            {
                # One burn trips several tiers; the page says it all, so the same SLO's ticket
                # stays quiet. Both sides must carry an slo label: health alerts have none, and
                # missing labels would compare equal. A request class's page silences that
                # class's ticket only (an SLO's own alerts carry no class: they stay as they were).
                "source_matchers": [eq(n.LABEL_SEVERITY, page).render(),
                                    regex(n.LABEL_SLO, ".+").render()],
                "target_matchers": [eq(n.LABEL_SEVERITY, ticket).render(),
                                    regex(n.LABEL_SLO, ".+").render()],
                "equal": [n.LABEL_SLO, n.LABEL_SERVICE, LABEL_CLASS],
            },
        ],
        "receivers": [
            {"name": RECEIVER_CONTROLLER, "webhook_configs": webhooks},
            {"name": RECEIVER_PAGE},
            {"name": RECEIVER_TICKET},
        ],
    }


def alertmanager_args(*, config_file: str, storage_path: str,
                      listen_address: str = ALERTMANAGER.address(LISTEN_HOST)) -> list[str]:
    """The flags to start a single Alertmanager 0.25 with this configuration. Clustering is
    off: a lone instance would otherwise wait for gossip to settle before it notifies."""
    return [
        f"--config.file={config_file}",
        f"--storage.path={storage_path}",
        f"--web.listen-address={listen_address}",
        "--cluster.listen-address=",
    ]
