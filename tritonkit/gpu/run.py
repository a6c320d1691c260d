"""The GPU check's orchestration: the steps in order, what a failure blocks, the server stopped at the end.

The only module of the check that imports its steps; ``cli`` imports this one.
"""

from __future__ import annotations

import shutil
import sys

from deploy.lifecycle import local_server
from tritonkit.gpu import generation, measure, steps_export, steps_host, steps_serve
from tritonkit.gpu.state import Check
from tritonkit_errors import ExitStatus


def run(check: Check) -> int:
    """Every step of ``check``; 0 when none failed, else 1 (the failed steps named on stderr)."""
    # SIGTERM / Ctrl-C unwind the steps once, into the `finally` below that stops the server the serve step
    # started (its server outlives the step, so no `with` block of the step's own can hold it); the process
    # then exits 128 + signum (deploy/lifecycle.py).
    with local_server(None):
        return _run(check)


def _run(check: Check) -> int:
    try:
        order = [
            ("wheels", steps_host.wheels),
            ("environment", steps_host.environment),
            ("export", steps_export.export),
            ("configs", steps_export.configs),
            ("inprocess", measure.inprocess),
            ("serve", steps_serve.serve),
        ]
        needs_server = [
            ("answers", steps_serve.answers),
            ("served_throughput", measure.served_throughput),
            ("gpu_memory", measure.gpu_memory),
            ("first_request", steps_serve.first_request),
        ]
        blocked = None
        for name, func in order:
            if blocked:
                check.skip(name, f"skipped: {blocked} failed")
                continue
            ok = check.step(name, func, check)
            # A failed export blocks the rest only when no served variant passed its parity check.
            if not ok and (name in ("environment", "serve") or (name == "export" and not check.served)):
                blocked = name
        for name, func in needs_server:
            if check.server is None or blocked:
                check.skip(name, f"skipped: {blocked or 'serve'} failed")
            else:
                check.step(name, func, check)
        if not check.generation:
            check.skip("generation", "skipped: --no-generation")
        elif blocked == "environment":
            check.skip("generation", "skipped: environment failed")
        else:  # its own exports and server: it does not need the others'
            check.step("generation", generation.generation, check)
        check.step("stop", steps_host.stop, check)
        check.step("targets", steps_host.targets, check)
    finally:
        if check.server is not None:
            check.server.stop()
        if not check.keep:
            shutil.rmtree(check.workdir, ignore_errors=True)
        check.write()
    failed = [s["name"] for s in check.results["steps"] if s["status"].startswith("failed")]
    md, js = check.out_dir / "results.md", check.out_dir / "results.json"
    print(f"\n{md.read_text()}\nresults: {md} and {js} ({check.results['seconds']:.0f} s)")
    if failed:
        print(f"check: failed steps: {', '.join(failed)}", file=sys.stderr)
        return ExitStatus.FAILED
    return ExitStatus.OK
