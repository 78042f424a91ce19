"""How Alertmanager talks to the controller: shared by the generated route, the controller and
what reads its record of the alerts (``governor up``'s story).

Alertmanager re-sends a firing alert on the controller's route every
``CONTROL_REPEAT_INTERVAL_SECONDS`` (``repeat_interval``), so the controller forgets an alert it
has not heard of for ``ALERT_EXPIRY_REPEATS`` of those intervals: a notification or two may be
lost, and a firing alert is still not forgotten.

>>> CONTROL_REPEAT_INTERVAL_SECONDS * ALERT_EXPIRY_REPEATS
900
"""

from __future__ import annotations

from typing import Final

CONTROL_REPEAT_INTERVAL_SECONDS: Final = 300
ALERT_EXPIRY_REPEATS: Final = 3

# What started a pass of the controller, as its audit lines and /status record it
# ({"by": ..., "alerts": [...]}, "woken_by"): a webhook notification (the alerts it carried that
# were new or resolved, by name), the periodic check (every --resync without one), or the first
# pass after the controller started.
WOKEN_BY_ALERT: Final = "alert"
WOKEN_PERIODIC: Final = "periodic"
WOKEN_AT_START: Final = "start"
