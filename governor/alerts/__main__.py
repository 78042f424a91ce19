"""``python -m governor.alerts`` is ``governor generate``."""

import sys

from governor.alerts.cli import main

sys.exit(main())
