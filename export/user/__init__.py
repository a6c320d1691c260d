"""A model the user brings: a factory in a file and its tensor specs (``model``), a pipeline of the user's own steps
around it (``pipeline``, ``pipeline_spec``, ``pipeline_run``), and the record of such an export (``recorded``)."""
