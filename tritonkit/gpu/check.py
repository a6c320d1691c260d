"""``python -m tritonkit.gpu.check OUT_DIR [--dry-run]``: the GPU check, as ``check.sh`` runs it.

A thin alias of ``tritonkit gpu-check`` (:mod:`tritonkit.gpu.cli`, where the steps are described).
"""

import sys

from tritonkit.gpu.cli import main

if __name__ == "__main__":
    sys.exit(main())
