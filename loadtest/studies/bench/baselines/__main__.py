"""``python -m loadtest.studies.bench.baselines ...``: the FastAPI baseline under uvicorn (``command``)."""

import sys

from loadtest.studies.bench.baselines.command import main

sys.exit(main())
