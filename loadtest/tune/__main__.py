"""``python -m loadtest.tune NAME ...`` = ``tritonkit tune NAME ...``."""

import sys

from loadtest.tune.command import main

sys.exit(main())
