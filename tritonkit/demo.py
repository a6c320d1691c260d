"""``tritonkit demo`` (make demo): the main job end to end on this machine.

Export every built-in model (checked against eager PyTorch), start the real tritonserver, send the
held-out digits over HTTP and gRPC, print the answers and what the server's own metrics say about
them, run the pipelines, end with a short Locust load campaign (loadtest/campaigns/smoke.toml) whose
report lands in reports/smoke/, stop the server.

``--http-url`` (with ``--grpc-url`` and ``--metrics-url``) runs the same steps against a server already
running on that repository; ``--campaign-seconds`` shortens the campaign's scenarios; ``--models digits``
runs digits' step alone: it exports and loads digits only, and the campaign keeps its scenarios on digits (a
pipeline's step exports everything and loads the whole repository, as the full demo does).

It prints only its own lines: what libraries write on the way (warnings, notices, progress bars, torch's C++
side, Locust's output) goes to ``demo.log`` in the reports folder (``reports/demo.log``), which its last line names;
an error is one line naming that log, which holds the whole message (and the traceback of an unexpected one).

Exit status: 0 every step passed and the campaign's SLO gate held; 1 an export, the server or the gate
failed, a stub process or /dev/shm region was left behind, or another error; 2 a bad argument or setting;
128 + the signal (130 Ctrl-C, 143 SIGTERM) when stopped by one, the server stopped first.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploy import quiet
from deploy.client import connect, infer, metrics, model_metric
from deploy.errors import ServerError
from deploy.lifecycle import local_server
from deploy.server import ServerConfig
from export import catalog
from export.errors import ExportError
from tritonkit_errors import ExitStatus, TritonkitError

if TYPE_CHECKING:
    from loadtest.target.endpoints import Endpoints

REPORTS = Path("reports")


def _export(repository, entries) -> None:
    """Export the catalog ``entries`` into ``repository``."""
    from export.pipeline import export_entry

    entries = list(entries)
    # as wide as the longest name it will print (export_entry's default target, cpu), so the rows line up
    width = max(len(variant.model_name(entry.name)) for entry in entries for variant in entry.variants["cpu"])
    print("== export: each variant checked against eager PyTorch FP32 on random and real data")
    for entry in entries:
        for done in export_entry(entry, repository):
            state = "up to date" if done.up_to_date else done.result.status
            print(f"  {done.spec.name:<{width}} {str(done.variant):<17} {state:<10} {done.result.details()}")
            if not done.result.ok:
                raise ExportError(f"{done.spec.name}: {done.result.summary()}")


def _digits(urls: Endpoints) -> None:
    from export.zoo.digits import accuracy, split

    _, x_test, _, y_test = split()
    grpc = connect("grpc", urls.grpc)
    before = metrics(urls.metrics)

    print(f"\n== digits: {len(x_test)} held-out scans, one request per scan, 16 at a time over HTTP")
    started = time.perf_counter()
    local = threading.local()  # one HTTP connection per thread, as a real client pool would keep

    def one(row):
        if not hasattr(local, "client"):
            local.client = connect("http", urls.http)
        return infer(local.client, "digits", {"PIXELS": row[None]})["PROBABILITIES"][0]

    with ThreadPoolExecutor(16) as pool:
        rows = list(pool.map(one, x_test))
    elapsed = time.perf_counter() - started
    http_probs = np.stack(rows)
    print(f"  accuracy {accuracy(http_probs, y_test):.4f} in {elapsed:.2f} s ({len(x_test) / elapsed:.0f} requests/s)")

    grpc_probs = np.concatenate(
        [infer(grpc, "digits", {"PIXELS": x_test[i : i + 64]})["PROBABILITIES"] for i in range(0, len(x_test), 64)]
    )
    print(
        f"  gRPC in batches of 64: accuracy {accuracy(grpc_probs, y_test):.4f}, "
        f"max |HTTP - gRPC| = {np.abs(http_probs - grpc_probs).max():.2e}"
    )

    print("\n  scan  label  predicted  confidence")
    for i in range(8):
        print(f"  {i:>4}  {y_test[i]:>5}  {http_probs[i].argmax():>9}  {http_probs[i].max():>10.4f}")

    after = metrics(urls.metrics)
    requests = model_metric(after, "nv_inference_count", "digits") - model_metric(
        before, "nv_inference_count", "digits"
    )
    executions = model_metric(after, "nv_inference_exec_count", "digits") - model_metric(
        before, "nv_inference_exec_count", "digits"
    )
    queue_us = model_metric(after, "nv_inference_queue_duration_us", "digits") - model_metric(
        before, "nv_inference_queue_duration_us", "digits"
    )
    compute_us = model_metric(after, "nv_inference_compute_infer_duration_us", "digits") - model_metric(
        before, "nv_inference_compute_infer_duration_us", "digits"
    )
    calls = model_metric(after, "nv_inference_request_success", "digits") - model_metric(
        before, "nv_inference_request_success", "digits"
    )
    print(f"\n== server metrics for digits (from {urls.metrics})")
    print(
        f"  {int(calls)} requests, {int(requests)} inferences in {int(executions)} executions: "
        f"dynamic batching formed batches of {requests / max(executions, 1):.1f} on average"
    )
    print(
        f"  mean queue {queue_us / max(calls, 1):.0f} us, mean compute {compute_us / max(calls, 1):.0f} us per request"
    )


def _image_classifier(urls: Endpoints) -> None:
    import io

    import skimage.data
    from PIL import Image

    print(
        "\n== image_classifier: JPEG bytes in, ImageNet classes out (preprocess -> efficientnet_lite0 -> postprocess)"
    )
    client = connect("grpc", urls.grpc)
    for name in ("coffee", "chelsea", "astronaut"):
        buffer = io.BytesIO()
        Image.fromarray(getattr(skimage.data, name)()).save(buffer, "JPEG")
        answer = infer(
            client,
            "image_classifier",
            {"IMAGE": np.array([[buffer.getvalue()]], dtype=object), "TOP_K": np.array([[3]], dtype=np.int32)},
        )
        top = ", ".join(
            f"{label.decode()} {score:.2f}"
            for label, score in zip(answer["LABELS"][0], answer["SCORES"][0], strict=True)
        )
        print(f"  scikit-image {name:<10} ({len(buffer.getvalue()):>6} bytes): {top}")


def _text_embedder(urls: Endpoints) -> None:
    print("\n== text_embedder: text in, all-MiniLM-L6-v2 embedding out (tokenize -> minilm)")
    sentences = [
        "A man is playing a guitar on stage.",
        "Someone performs music with a guitar.",
        "The stock market fell sharply on Monday.",
    ]
    client = connect("http", urls.http)
    answer = infer(client, "text_embedder", {"TEXT": np.array([[s.encode()] for s in sentences], dtype=object)})
    vectors = answer["EMBEDDING"]
    for i, j in ((0, 1), (0, 2)):
        print(f"  cosine {float(vectors[i] @ vectors[j]):.3f}  {sentences[i]!r} ~ {sentences[j]!r}")


def _text_generator(urls: Endpoints) -> None:
    import json
    import urllib.request

    question, max_tokens = "What is the capital of France?", 64
    print("\n== text_generator: SmolLM2-135M-Instruct, greedy, streamed over HTTP generate_stream (server-sent events)")
    print(
        "  CHAT=true: the question goes through the model's own chat template (from its GGUF); the answer "
        "ends at the template's end-of-turn token"
    )
    request = urllib.request.Request(
        f"http://{urls.http}/v2/models/text_generator/generate_stream",
        data=json.dumps({"PROMPT": question, "MAX_TOKENS": max_tokens, "TEMPERATURE": 0.0, "CHAT": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    started, first, pieces = time.perf_counter(), None, []
    print(f"  Q: {question}\n  A: ", end="", flush=True)
    with urllib.request.urlopen(request, timeout=120) as response:
        for line in response:
            if not line.startswith(b"data:"):
                continue
            event = json.loads(line[5:])
            if "error" in event:
                raise RuntimeError(f"text_generator: {event['error']}")
            piece = event.get("TEXT", "")
            piece = piece[0] if isinstance(piece, list) else piece
            first = first or time.perf_counter()
            pieces.append(piece)
            print(piece, end="", flush=True)
    elapsed = time.perf_counter() - started
    print(
        f"\n  {len(pieces)} pieces (MAX_TOKENS {max_tokens}); first after {(first - started) * 1e3:.0f} ms, "
        f"{len(pieces) / elapsed:.1f} pieces/s"
    )


def run(args: argparse.Namespace) -> int:
    if args.http_url and not (args.grpc_url and args.metrics_url):
        print("demo: error: --http-url needs --grpc-url and --metrics-url too", file=sys.stderr)
        return ExitStatus.USAGE
    if args.campaign_seconds is not None and not args.campaign_seconds > 0:
        print(f"demo: error: --campaign-seconds {args.campaign_seconds:g} must be > 0", file=sys.stderr)
        return ExitStatus.USAGE
    models = tuple(dict.fromkeys(args.models or STEPS))
    try:
        # A model of the catalog alone is exported and loaded by name; a pipeline calls models of the whole
        # repository.
        entries = catalog.load()
        plain = all(m in entries for m in models)
        config = ServerConfig(
            model_repository=args.repository, cpus=args.server_cpus, load_models=models if plain else ("*",)
        )
    except ValueError as exc:  # a bad catalog setting, a repository that is not a folder, CPUs this machine lacks
        print(f"demo: error: {exc}", file=sys.stderr)
        return ExitStatus.USAGE
    # Library output (torch's and transformers' warnings, tqdm bars, C++ notices) goes to the log, not the terminal.
    log = (args.reports or REPORTS) / "demo.log"
    with quiet.noise_to(log) as sink:
        try:
            status = _run(args, config, entries, models, plain)
        except (ServerError, ExportError) as exc:
            status = _error(exc, log, sink, ExitStatus.FAILED)
        except TritonkitError as exc:  # a bad setting met on the way: as tritonkit reports any
            status = _error(exc, log, sink, ExitStatus.USAGE)
        except Exception as exc:  # noqa: BLE001 - one line here, the traceback in the log
            traceback.print_exc(file=sink)
            status = _error(exc, log, sink, ExitStatus.FAILED)
    print(f"  library output (warnings, notices, progress bars): {log}{'' if log.stat().st_size else ' (none)'}")
    return status


def _error(exc: Exception, log: Path, sink, status: ExitStatus) -> int:
    """``status`` after one line on stderr naming the log, which gets the whole message."""
    print(f"demo: error: {exc}", file=sink)
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    print(f"demo: error: {first} (details: {log})", file=sys.stderr)
    return status


def _run(args: argparse.Namespace, config: ServerConfig, entries, models: tuple[str, ...], plain: bool) -> int:
    """The demo's steps, export to stop; its exit status."""
    from loadtest.target.endpoints import Endpoints

    _export(config.model_repository, [entries[m] for m in models] if plain else entries.values())
    if args.client_cpus:
        os.sched_setaffinity(0, args.client_cpus)  # the Locust workers started from here inherit it
    if args.http_url:
        print(f"\n== serve: the server at HTTP {args.http_url}, gRPC {args.grpc_url}")
        with local_server(None):  # nothing to stop; a signal still unwinds the run once
            return 1 if _show(Endpoints(args.http_url, args.grpc_url, args.metrics_url), args, models) else 0
    print(f"\n== serve: tritonserver on HTTP {config.http_url}, gRPC {config.grpc_url}, metrics {config.metrics_url}")
    # Stopped however the block ends; Ctrl-C or SIGTERM exits 128 + signum once it is (deploy/lifecycle.py).
    with local_server(config) as server:
        try:
            print(f"  ready; {len(server.stub_pids())} Python-backend stub processes")
            status = _show(Endpoints.of(server), args, models)
        finally:
            print("\n== stop")
    left = server.left_behind
    print(
        "  server stopped; "
        + (f"LEFT BEHIND: {left}" if left else "no stub process or /dev/shm region left")
        + f"; log: {server.log_path}"
    )
    return 1 if left or status else 0


STEPS = {
    "digits": _digits,
    "image_classifier": _image_classifier,
    "text_embedder": _text_embedder,
    "text_generator": _text_generator,
}
"""The demo's steps, one per public model, in the order they run."""


def _show(urls: Endpoints, args: argparse.Namespace, models: tuple[str, ...]) -> int:
    """The steps of ``models`` against the server at ``urls``; the campaign's exit status."""
    for name, step in STEPS.items():
        if name in models:
            step(urls)
    return _campaign(urls, args, models)


def _campaign(urls: Endpoints, args: argparse.Namespace, models: tuple[str, ...]) -> int:
    """The short load campaign (loadtest/campaigns/smoke.toml): both protocols, closed and open loop; its
    scenarios on ``models``; ``--campaign-seconds`` shortens each scenario (its warmup to a quarter of that), the
    same runs otherwise."""
    from loadtest.campaign import file as campaign
    from loadtest.campaign.command import CAMPAIGNS, REPORTS
    from loadtest.campaign.execution import execute

    smoke = campaign.load(CAMPAIGNS / "smoke.toml")
    scenarios = tuple(s for s in smoke.scenarios if s.model in models)
    if not scenarios:
        print(f"\n== load campaign {smoke.name!r}: no scenario on {', '.join(models)}; skipped")
        return 0
    smoke = dataclasses.replace(smoke, scenarios=scenarios)
    if args.campaign_seconds is not None:
        seconds = args.campaign_seconds
        smoke = dataclasses.replace(
            smoke,
            scenarios=tuple(
                dataclasses.replace(s, duration_s=seconds, warmup_s=min(s.warmup_s, seconds / 4))
                for s in smoke.scenarios
            ),
        )
    print(
        f"\n== load campaign {smoke.name!r}: Locust through tritonclient, "
        f"{len(smoke.scenarios)} scenarios of {smoke.scenarios[0].duration_s:g} s, SLO p99 <= {smoke.slo.p99_ms:g} ms"
    )
    out = args.reports or REPORTS / smoke.name
    return execute(smoke, urls, args.repository, out, dry_run=True)


HELP = "export, serve, send real requests, print results, stop"


def arguments(parser: argparse.ArgumentParser) -> None:
    from loadtest.cli import flags

    flags.add_server_flags(parser)
    parser.add_argument(
        "--models",
        nargs="+",
        choices=STEPS,
        metavar="MODEL",
        help=f"the steps to run, one per model (default all: {' '.join(STEPS)}); the campaign keeps their scenarios",
    )
    parser.add_argument(
        "--campaign-seconds",
        type=float,
        help="each scenario of the closing campaign runs this long (default: smoke.toml's own durations)",
    )
    parser.add_argument("--reports", type=Path, help="the campaign's report folder (default: reports/smoke)")
    parser.set_defaults(handler=run)
