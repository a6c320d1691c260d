"""``python -m loadtest.studies.first_request ...`` = ``tritonkit first-request ...``."""

import sys

from loadtest.studies.first_request.command import main

sys.exit(main())
