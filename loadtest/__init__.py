"""Load campaigns through tritonclient (Locust), Triton's own metrics, reports, SLO gates and tuning.

``tritonkit loadtest CAMPAIGN.toml`` runs a campaign (loadtest/cli.py); ``python -m loadtest.studies.bench``
is the side-by-side benchmark; ``python -m loadtest.measure.report results.json`` re-renders a report.
README's "Load testing" section explains the parts.
"""
