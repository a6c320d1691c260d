"""The applications layer: what runs everything else, end to end.

``tritonkit/demo.py`` (``tritonkit demo``) and ``tritonkit/gpu/`` (the GPU check) sit here, beside
``tritonkit_cli.py`` (the ``tritonkit`` command line), at the top of the project's layers: they may import
``loadtest``, ``deploy``, ``export`` and ``backends``, and nothing below imports them (docs/architecture.md,
enforced by tests/unit/test_imports.py).
"""
