"""``python -m deploy serve ...``: the same as ``tritonkit serve``.

An entry point that nothing imports, so the one kind of module allowed to import the layer above deploy/
(tests/unit/test_imports.py, docs/architecture.md#the-layers).
"""

import sys

from tritonkit_cli import main

sys.exit(main(["serve", *sys.argv[2:]] if sys.argv[1:2] == ["serve"] else ["serve", *sys.argv[1:]]))
