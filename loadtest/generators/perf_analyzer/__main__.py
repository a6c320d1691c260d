"""``python -m loadtest.generators.perf_analyzer ...``: one perf_analyzer run of a served model (``command``)."""

import sys

from loadtest.generators.perf_analyzer.command import main

sys.exit(main())
