"""``python -m governor.controller``: the same as ``governor controller``."""

import sys

from governor.controller.cli import main

sys.exit(main())
