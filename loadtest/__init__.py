"""Load campaigns through tritonclient (Locust), Triton's own metrics, reports, SLO gates and tuning.

``tritonkit loadtest CAMPAIGN.toml`` runs a campaign (loadtest/campaign/command.py); ``tritonkit bench``
is the side-by-side benchmark; ``tritonkit report results.json`` re-renders a report.
docs/load-testing.md and docs/tuning.md explain the parts.

Folders by feature over a small shared core, each importing only the ones below it
(``tests/unit/test_imports.py`` checks it; docs/architecture.md says where each thing goes)::

    campaign/     tritonkit loadtest: campaign files, a campaign end to end, its [tune] step
    tune/         tritonkit tune: the search space, the search, the pick on evidence, the writer, Model Analyzer
    capacity/     tritonkit capacity: the highest rate under a p99 budget, the replica plan, its report
    studies/      one folder per study (bench, overload, soak, floor, generation, genai_perf, aiperf,
                  first_request, compare); no study imports another
    cli/          the flag groups every command shares, the shape of a study command
    reports/      the one report writer, the campaign report and tritonkit report
    probes/       measurements that are not load: the in-process ceiling, the first request
    generators/   the generator seam, one measurement and the fell-behind rule, payloads, arrivals, locust/,
                  perf_analyzer/
    target/       the server measured: endpoints, model control, Triton's metrics and trace
    core/, errors the vocabulary: run spec, SLO, measurement, results, evidence, trials, metric names

A folder's ``command.py`` (its command line) and ``__main__.py`` (its ``python -m`` alias) sit above every
folder: they may import any of them, and nothing but another command imports them.

Project modules are imported at the top of each module. An import inside a function is kept only where it
defers a heavy package (torch, matplotlib, tritonclient, Locust/gevent, FastAPI, scikit-learn, ...), directly
or through the project module it names, so ``tritonkit --help`` and the Locust workers stay light.
"""
