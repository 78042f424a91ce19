"""``python -m controller``: the same as ``governor controller``."""

import sys

from controller.cli import main

sys.exit(main())
