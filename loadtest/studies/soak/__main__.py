"""``python -m loadtest.studies.soak ...`` = ``tritonkit soak ...``."""

import sys

from loadtest.studies.soak.command import main

sys.exit(main())
