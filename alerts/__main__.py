"""``python -m alerts`` is ``governor generate``."""

import sys

from alerts.cli import main

sys.exit(main())
