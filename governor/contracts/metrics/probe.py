"""The synthetic probe's ``governor_probe_*`` series (``governor probe``), and the header that
marks its requests.

The probe sends a small streaming request to each target on an interval and measures it as a
client would: time to first token, the gaps between tokens, and whether the request succeeded.
Its latency histograms have the service's own edges, so an SLO of ``slo.yaml`` may take either
as its SLI with the same thresholds; its request counter, by ``result``, makes a ratio SLI::

    >>> REQUESTS.total, RESULT_SUCCESS
    ('governor_probe_requests_total', 'success')
"""

from __future__ import annotations

from typing import Final

from governor.contracts.declaration import Metric
from governor.contracts.metrics import service

# ---- label names and values ----------------------------------------------------------------------
LABEL_TARGET: Final = "target"  # the target's name, as slo.yaml's probe.targets names it
LABEL_URL: Final = "url"  # the replica's base URL (a target may have several)
LABEL_RESULT: Final = "result"
RESULT_SUCCESS: Final = "success"
# The request was not answered within the probe's timeout (connect to last token).
RESULT_TIMEOUT: Final = "timeout"
# No connection, or it broke before the stream ended.
RESULT_CONNECTION: Final = "connection_error"
# An HTTP status other than 200.
RESULT_HTTP: Final = "http_error"
# 200, but no token came, or the stream was not OpenAI's server-sent events ending in [DONE].
RESULT_STREAM: Final = "bad_stream"
RESULTS: Final = (RESULT_SUCCESS, RESULT_TIMEOUT, RESULT_CONNECTION, RESULT_HTTP, RESULT_STREAM)

# ---- what each probe request measured ------------------------------------------------------------
TIME_TO_FIRST_TOKEN: Final = Metric(
    "governor_probe_time_to_first_token_seconds", "histogram",
    "Time from sending the probe's request to its first streamed token, of successful probes.",
    "seconds", (LABEL_TARGET, LABEL_URL), service.TIME_TO_FIRST_TOKEN.buckets,
)
INTER_TOKEN_LATENCY: Final = Metric(
    "governor_probe_inter_token_latency_seconds", "histogram",
    "Time between successive streamed tokens of the probe's successful requests.", "seconds",
    (LABEL_TARGET, LABEL_URL), service.INTER_TOKEN_LATENCY.buckets,
)
REQUESTS: Final = Metric(
    "governor_probe_requests", "counter",
    "Probe requests sent, by target, replica and result (success, timeout, connection_error, "
    "http_error, bad_stream).", "requests", (LABEL_TARGET, LABEL_URL, LABEL_RESULT),
)
SUCCESS: Final = Metric(
    "governor_probe_success", "gauge",
    "1 if the last probe of the replica succeeded, 0 if it failed (absent before the first).",
    "", (LABEL_TARGET, LABEL_URL),
)
LAST_PROBE: Final = Metric(
    "governor_probe_last_timestamp_seconds", "gauge",
    "Unix time the last probe of the replica finished.", "seconds", (LABEL_TARGET, LABEL_URL),
)
INTERVAL: Final = Metric(
    "governor_probe_interval_seconds", "gauge",
    "The probe's interval: each replica gets one request per interval, give or take the "
    "jitter.", "seconds",
)

LATENCY_HISTOGRAMS: Final = (TIME_TO_FIRST_TOKEN, INTER_TOKEN_LATENCY)
# What an SLI of slo.yaml may select of the probe's (a histogram by its name, the others by their
# series): the rules select these on the probe's job, not the inference target's.
SLI_SERIES: Final = frozenset({*(h.name for h in LATENCY_HISTOGRAMS), REQUESTS.series,
                               SUCCESS.series})
