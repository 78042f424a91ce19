"""``python -m governor.exporters``: the same as ``governor exporter``."""

import sys

from governor.exporters.cli import main

raise SystemExit(main(sys.argv[1:]))
