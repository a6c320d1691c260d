"""``python -m loadtest.reports results.json`` = ``tritonkit report results.json``."""

import sys

from loadtest.reports.command import main

sys.exit(main())
