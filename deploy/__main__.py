"""``python -m deploy serve ...``: the same as ``tritonkit serve``."""

import sys

from tritonkit_cli import main

sys.exit(main(["serve", *sys.argv[2:]] if sys.argv[1:2] == ["serve"] else ["serve", *sys.argv[1:]]))
