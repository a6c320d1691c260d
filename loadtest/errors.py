"""Errors of the load-test tools; each message names the bad value and what was expected."""

from tritonkit_errors import TritonkitError


class LoadTestError(TritonkitError):
    """Base of every load-test error."""


class CampaignError(LoadTestError):
    """The campaign file is invalid."""


class VariantError(LoadTestError):
    """A config variant could not be applied to the running server."""


class RunError(LoadTestError):
    """Locust or the server failed during a run."""


class TuneError(LoadTestError):
    """A model cannot be tuned as asked, no config meets the SLO, or the pick cannot be written."""


class PayloadError(LoadTestError, ValueError):
    """Request payloads could not be made for a model: a dynamic dim without ``--shape``, BYTES without data,
    a data file or samples function that does not fit the served config. The message is one line naming the
    input (and the entry) and the flag to use."""
