"""``python -m loadtest.studies.floor ...`` = ``tritonkit floor ...``."""

import sys

from loadtest.studies.floor.command import main

sys.exit(main())
