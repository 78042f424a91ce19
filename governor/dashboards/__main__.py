"""``python -m governor.dashboards`` writes the Grafana files alone (``governor generate`` writes
all)."""

import sys

from governor.dashboards.cli import main

sys.exit(main())
