"""Choosing a config from measurements: the auto-tuner's pick and how it is written (``autotune``), the
campaign's [tune] step (``tuning``) and Triton Model Analyzer's pick (``analyzer``). Imports
``loadtest.measure``, ``loadtest.drive`` and the campaign model, never ``loadtest.studies``."""
