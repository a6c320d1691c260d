"""Load campaigns through tritonclient (Locust), Triton's own metrics, reports, SLO gates and tuning.

``tritonkit loadtest CAMPAIGN.toml`` runs a campaign (loadtest/cli.py); ``python -m loadtest.studies.bench``
is the side-by-side benchmark; ``python -m loadtest.measure.report results.json`` re-renders a report.
docs/load-testing.md and docs/tuning.md explain the parts.

Layers, each importing only the ones below it (``tests/unit/test_imports.py`` checks it)::

    cli.py, execution.py   the command line and a campaign end to end: may import every layer
    studies/               bench (+ baselines/), overload (+ overload_report), soak, generation;
                           no study imports another
    tune/                  command (tritonkit tune), space, search, tuner, writer, autotune, report, tuning
                           (the campaign's [tune] step), analyzer, compare (Model Analyzer side by side)
    measure/               results, server_metrics, slo, report, run (one run, both sides), probe (one
                           measurement, saturation marked), saturation
                           (the searches the studies share), study_report, inprocess, first_request
    drive/                 payloads, users, locustfile, locust_main, latency, client_stats, runner
                           (Locust as a subprocess), perf, perf_windows, apply (model control), target
    campaign.py, errors.py the campaign model

Project modules are imported at the top of each module. An import inside a function is kept only where it
defers a heavy package (torch, matplotlib, tritonclient, Locust/gevent, FastAPI, scikit-learn, ...), directly
or through the project module it names, so ``tritonkit --help`` and the Locust workers stay light.
"""
