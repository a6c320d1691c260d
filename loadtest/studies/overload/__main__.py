"""``python -m loadtest.studies.overload ...`` = ``tritonkit overload ...``."""

import sys

from loadtest.studies.overload.command import main

sys.exit(main())
