"""``python -m loadtest.studies.generation ...`` = ``tritonkit bench-generation ...``."""

import sys

from loadtest.studies.generation.command import main

sys.exit(main())
