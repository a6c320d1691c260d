"""``python -m loadtest.probes ...``: the in-process ceiling of one exported model (``command``)."""

import sys

from loadtest.probes.command import main

sys.exit(main())
