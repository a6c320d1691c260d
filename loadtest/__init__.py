"""Load campaigns through tritonclient (Locust), Triton's own metrics, reports, SLO gates and tuning.

``tritonkit loadtest CAMPAIGN.toml`` runs a campaign (loadtest/cli.py); ``tritonkit bench``
is the side-by-side benchmark; ``tritonkit report results.json`` re-renders a report.
docs/load-testing.md and docs/tuning.md explain the parts.

Layers, each importing only the ones below it (``tests/unit/test_imports.py`` checks it)::

    cli.py, execution.py,  the command lines of loadtest and capacity, a campaign end to end: may import
    capacity_cli.py        every layer
    studies/               bench (+ bench_rows, bench_once, bench_report, bench_targets, baselines/), overload
                           (+ overload_rows, overload_report), soak (+ soak_checks, soak_report), generation,
                           compare/ (tritonkit compare, the A/B gate); no study imports another
    tune/                  command (tritonkit tune), space, search, decide (the pick on interleaved trials),
                           tuner, writer, autotune, report, tuning (the campaign's [tune] step), analyzer,
                           compare (Model Analyzer side by side)
    measure/               evidence (intervals over trials, the three-way verdict, A/B verdicts, goodput),
                           trials (interleaved arms), slo (the one SLO rule), capacity (+ capacity_result, knee,
                           replica_plan, capacity_report: the highest rate under the SLO), results,
                           server_metrics, report (+ report_plots), run (one run, both sides), probe (one
                           measurement by either generator, saturation marked), saturation (the searches the
                           studies share), study_report, inprocess, first_request
    drive/                 flags (the shared flag groups), payloads, users, locustfile, locust_main, latency,
                           client_stats (the one percentile), arrivals (open-loop patterns), runner (Locust as
                           a subprocess), perf, perf_windows, profile_export (perf_analyzer's per-request times),
                           apply (model control), target
    campaign.py, errors.py the campaign model

Project modules are imported at the top of each module. An import inside a function is kept only where it
defers a heavy package (torch, matplotlib, tritonclient, Locust/gevent, FastAPI, scikit-learn, ...), directly
or through the project module it names, so ``tritonkit --help`` and the Locust workers stay light.
"""
