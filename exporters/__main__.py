"""``python -m exporters``: the same as ``governor exporter``."""

import sys

from exporters.cli import main

raise SystemExit(main(sys.argv[1:]))
