"""``python -m loadtest.generators SCHEDULE OUT``: a schedule as perf_analyzer's request intervals (``command``)."""

import sys

from loadtest.generators.command import main

sys.exit(main())
