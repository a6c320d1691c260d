"""``python -m loadtest.studies.bench ...`` = ``tritonkit bench ...``."""

import sys

from loadtest.studies.bench.command import main

sys.exit(main())
