"""``tritonkit tune``: choosing a config from measurements: the search space, the search, the pick on interleaved
trials (``decide``), how it is written (``writer``, ``autotune``) and Triton Model Analyzer's pick beside it
(``analyzer``, ``compare``). Imports ``loadtest.capacity`` and the folders below it, never ``loadtest.studies``."""
