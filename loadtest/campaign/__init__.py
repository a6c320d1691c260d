"""``tritonkit loadtest``: campaign files (``spec``), the campaign a command line describes (``args``), a
campaign end to end (``execution``) and the command."""
