"""``tritonkit bench``: the same model served five ways under the same load, in repeated rounds."""
