"""``python -m governor.probe``: the same as ``governor probe``."""

import sys

from governor.probe.cli import main

raise SystemExit(main(sys.argv[1:]))
