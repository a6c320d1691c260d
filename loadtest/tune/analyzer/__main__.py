"""``python -m loadtest.tune.analyzer ...`` = ``tritonkit analyzer ...``."""

import sys

from loadtest.tune.analyzer.command import main

sys.exit(main())
