"""``python -m dashboards`` writes the Grafana files alone (``governor generate`` writes all)."""

import sys

from dashboards.cli import main

sys.exit(main())
