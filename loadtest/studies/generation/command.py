"""Streaming generation benchmark: served in-flight batching against the batched step in-process, and warmup.

    tritonkit bench-generation [--tokens 64] [--streams 1 8 32] [--server-cpus 1 --client-cpus 0]
                               [--no-split-cpus] [--no-step-modes] [--no-first-request] [--tiny]

Starts its own local tritonserver on free ports with a temporary repository holding the exported
SmolLM2 steps (``model_repository/smollm2_prefill`` / ``smollm2_decode``, linked, exported first if
missing) and the committed ``text_generator`` (``text_generator_bls``: the same with a BLS request per
step; ``text_generator_cold``: the same with ``WARMUP`` off). The server and its stubs run on
``--server-cpus``, this process (the load generator) on ``--client-cpus``: by default the upper and
the lower half of the CPUs, so neither steals the other's cores.

1. **Throughput.** For each stream count N: the in-process row runs the same generation code the server runs
   (``backends.inflight.RunningBatch`` over the same TorchScript files) on exactly the server's CPUs with its
   torch threads and the generator's ``DISABLE_OPTIMIZED_EXECUTION``, at batch N on the same N prompts: one
   prefill, then ``--tokens - 1`` decode steps; its rate is N tokens per decode step. The served row sends N
   gRPC streams together (greedy, ``--tokens`` each) and counts the tokens the server generated (its log) over
   the wall time from the first request to the last final response: prefill and time to first token included.
   Then the ratio, against the targets (1 stream >= 0.9x batch 1, 8 >= 0.7x batch 8, 32 >= 0.6x batch 32),
   printed met or missed; and the served rows' streams in GenAI-Perf's terms (time_to_first_token,
   inter_token_latency, output_token_throughput), computed as ``tritonkit loadtest`` computes them
   (``loadtest.core.streams``), so they compare with its reports and with ``tritonkit genai-perf``.
2. **Step modes** (one stream; ``--no-step-modes`` skips): the median decode step as the server logs
   it, in-process against BLS, at a 5-token and a ~300-token prompt.
3. **First request** (``--no-first-request`` skips): the time to first token of the first request
   sent the moment the server reports ready, against the steady time to first token (median of later
   single requests), with ``WARMUP`` on and off, each from a fresh server; target within 1.5x.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import queue
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from deploy.errors import DeployError
from deploy.lifecycle import local_server
from deploy.server import DEFAULT_REPOSITORY, LocalServer, ServerConfig, free_ports
from export import catalog
from export.config import parse
from loadtest.cli import flags
from loadtest.cli.study import Study
from loadtest.core.streams import stream_figures, stream_summary
from loadtest.errors import LoadTestError
from tritonkit_errors import ExitStatus

# Prompts whose greedy continuation by SmolLM2-135M-Instruct runs past 64 tokens without an end of
# sequence, so every stream stays in the batch for the whole run.
PROMPTS = (
    "Explain in simple words why the sky is blue.",
    "List three uses of a paperclip:",
    "Once upon a time, in a small village,",
    "The best way to learn a new language is",
    "Here is a recipe for pancakes:",
    "def fibonacci(n):",
    "The history of the Roman Empire begins",
    "Here are some tips for staying healthy:",
)
LONG_PROMPT = " ".join(["The quick brown fox jumps over the lazy dog."] * 30)  # ~300 tokens
TARGETS = {1: 0.9, 8: 0.7, 32: 0.6}
"""Served tokens/s over the in-process step rate at the same batch size, at least."""
FIRST_REQUEST_MAX = 1.5
"""First request's TTFT after ready over the steady TTFT, at most."""
GENERATORS = {
    "text_generator": {},
    "text_generator_bls": {"STEP_MODE": "bls"},
    "text_generator_cold": {"WARMUP": "false"},
}


def steps_of(tiny: bool) -> tuple[str, str]:
    return ("smollm2_tiny_prefill", "smollm2_tiny_decode") if tiny else ("smollm2_prefill", "smollm2_decode")


def set_parameters(config: str, name: str, steps: tuple[str, str], params: dict[str, str]) -> str:
    """The committed generator config renamed, pointed at ``steps``, with ``params`` set (added if absent)."""
    text = config.replace('name: "text_generator"', f'name: "{name}"')
    text = text.replace('"smollm2_prefill"', f'"{steps[0]}"').replace('"smollm2_decode"', f'"{steps[1]}"')
    for key, value in params.items():
        found = re.search(rf'key: "{key}"\s*value \{{ string_value: "[^"]*" \}}', text)
        entry = f'key: "{key}"\n  value {{ string_value: "{value}" }}'
        text = text.replace(found.group(0), entry) if found else text + f"parameters {{\n  {entry}\n}}\n"
    return text


def make_repository(root: Path, tiny: bool = False) -> Path:
    from export import pipeline  # torch

    repo = root / "repo"
    repo.mkdir()
    steps = steps_of(tiny)
    for name in steps:
        if not (DEFAULT_REPOSITORY / name / "1" / "model.pt").exists():
            for done in pipeline.export_entry(catalog.entry(name), DEFAULT_REPOSITORY):
                if not done.result.ok:
                    raise SystemExit(done.result.summary())
        (repo / name).symlink_to(DEFAULT_REPOSITORY / name, target_is_directory=True)
    committed = (DEFAULT_REPOSITORY / "text_generator" / "config.pbtxt").read_text()
    for name, params in GENERATORS.items():
        shutil.copytree(
            DEFAULT_REPOSITORY / "text_generator", repo / name, ignore=shutil.ignore_patterns("__pycache__")
        )
        (repo / name / "config.pbtxt").write_text(set_parameters(committed, name, steps, params))
    return repo


# -- the client side ---------------------------------------------------------------------------------
def stream_one(url: str, model: str, prompt: str, tokens: int, t0: float, result: dict) -> None:
    """One gRPC stream; fills ``result`` with its send and end times, when each response carrying text came
    (``times``; all from ``t0``) and their count (``pieces``)."""
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: events.put((time.perf_counter(), result, error)))
    inputs = [grpcclient.InferInput("PROMPT", [1], "BYTES"), grpcclient.InferInput("MAX_TOKENS", [1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    inputs[1].set_data_from_numpy(np.array([tokens], dtype=np.int32))
    sent = time.perf_counter()
    result["sent"] = sent - t0
    client.async_stream_infer(model, inputs, enable_empty_final_response=True)
    times: list[float] = []
    try:
        while True:
            at, response, error = events.get(timeout=300)
            if error is not None:
                raise RuntimeError(error)
            body = response.get_response()
            if body.outputs:  # the empty final response carries none
                times.append(at - t0)
            if body.parameters["triton_final_response"].bool_param:
                result["end"], result["times"], result["pieces"] = at - t0, times, len(times)
                return
    finally:
        client.stop_stream()
        client.close()


def run_streams(url: str, model: str, prompts: list[str], tokens: int, concurrent: bool = True) -> dict:
    results = [{} for _ in prompts]
    t0 = time.perf_counter()
    if concurrent:
        threads = [
            threading.Thread(target=stream_one, args=(url, model, p, tokens, t0, r))
            for p, r in zip(prompts, results, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for p, r in zip(prompts, results, strict=True):
            stream_one(url, model, p, tokens, t0, r)
    return summarize_streams(results)


def summarize_streams(results: list[dict]) -> dict:
    """Streams filled by ``stream_one``: TTFT mean and max (s), text responses, the wall time from their start
    (``t0``) to the last end, and ``streams``: ``stream_summary``'s TTFT, ITL and output tokens/s over it."""
    wall = max(r["end"] for r in results)
    figures = [stream_figures(r["sent"], r["times"]) for r in results]
    # A stream that ended at once (end of sequence first) has no text to time: its first token is its end.
    ttfts = [f.ttft_s if f else r["end"] - r["sent"] for f, r in zip(figures, results, strict=True)]
    return {
        "ttft_mean": statistics.mean(ttfts),
        "ttft_max": max(ttfts),
        "pieces": sum(r["pieces"] for r in results),
        "wall": wall,
        "streams": stream_summary(stream_rows(results, figures), wall),
    }


def stream_rows(results: list[dict], figures: list) -> list[list]:
    """The streams as ``ClientStats.streams`` keeps them, ``[latency_ms, ttft_ms, itl_ms or None, tokens]``, for
    ``stream_summary``: streams without text left out, as the load test keeps only streamed successes."""
    return [
        [(r["end"] - r["sent"]) * 1000, f.ttft_s * 1000, None if f.itl_s is None else f.itl_s * 1000, f.tokens]
        for r, f in zip(results, figures, strict=True)
        if f is not None
    ]


STEP_LINE = re.compile(r"([\w.-]+): (\d+) decode steps \((\w+)\), (\d+) tokens, median ([\d.]+) ms")


def logged_steps(log: str, model: str) -> list[tuple[int, int, float]]:
    """(decode steps, tokens, median step ms) of each batch run the generator logged, in order."""
    return [
        (int(m.group(2)), int(m.group(4)), float(m.group(5))) for m in STEP_LINE.finditer(log) if m.group(1) == model
    ]


def served_row(server: LocalServer, model: str, prompts: list[str], tokens: int) -> dict:
    """N streams together: tokens the server generated over the wall time, and its median decode step."""
    before = len(logged_steps(server.log_text(), model))
    r = run_streams(server.config.grpc_url, model, prompts, tokens)
    deadline = time.monotonic() + 10
    while len(logged_steps(server.log_text(), model)) == before and time.monotonic() < deadline:
        time.sleep(0.05)  # the log line comes as the batch empties, just after the last final response
    runs = logged_steps(server.log_text(), model)[before:]
    generated = sum(t for _, t, _ in runs)
    step_ms = max(runs, key=lambda run: run[0])[2] if runs else float("nan")
    return {**r, "tokens": generated, "tokens_per_s": generated / r["wall"], "step_ms": step_ms}


# -- the in-process side -----------------------------------------------------------------------------
def inprocess_row(steps, prompt_ids: list[list[int]], tokens: int) -> dict:
    """Prefill the prompts together, then ``tokens - 1`` decode steps for all rows (none retires)."""
    from backends.inflight import RunningBatch

    batch = RunningBatch(steps)
    rows = range(len(prompt_ids))
    times = []
    for measured in (False, True):  # the first pass warms, as the served generator warms while loading
        started = time.perf_counter()
        new = batch.prefill(prompt_ids)
        batch.add(new, new.logits.argmax(-1), rows)
        prefill_s = time.perf_counter() - started
        for _ in range(tokens - 1 if measured else 3):
            t0 = time.perf_counter()
            batch.advance(batch.decode().argmax(-1), rows)
            times.append(time.perf_counter() - t0)
        if not measured:
            times = []
        batch.clear()
    return {
        "prefill_s": prefill_s,
        "step_ms": statistics.median(times) * 1000,
        "tokens_per_s": len(prompt_ids) * len(times) / sum(times),
    }


def generator_optimized() -> bool:
    """Whether the committed generator runs its steps with TorchScript's optimised execution (as it is served)."""

    value = parse(DEFAULT_REPOSITORY / "text_generator" / "config.pbtxt").parameters.get("DISABLE_OPTIMIZED_EXECUTION")
    return not (value is not None and value.string_value.strip().lower() in ("1", "true", "yes", "on"))


class InProcess:
    """The exported steps in this process, run on ``cpus`` with ``threads`` torch threads."""

    def __init__(self, tiny: bool, cpus: frozenset[int], threads: int):
        import torch

        from backends.inflight import TorchScriptSteps
        from export.zoo import smollm

        prefill, decode = steps_of(tiny)
        self.optimized = generator_optimized()
        self.steps = TorchScriptSteps(
            DEFAULT_REPOSITORY / prefill / "1" / "model.pt",
            DEFAULT_REPOSITORY / decode / "1" / "model.pt",
            optimized=self.optimized,
        )
        self.tokenizer = smollm.tokenizer()
        self.cpus, self.threads, self.torch = cpus, threads, torch

    def row(self, prompts: list[str], tokens: int) -> dict:
        affinity, previous = os.sched_getaffinity(0), self.torch.get_num_threads()
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        self.torch.set_num_threads(self.threads)
        try:
            return inprocess_row(self.steps, [self.tokenizer.encode(p).ids for p in prompts], tokens)
        finally:
            os.sched_setaffinity(0, affinity)
            self.torch.set_num_threads(previous)


# -- first request ------------------------------------------------------------------------------------
def first_request(config: ServerConfig, model: str, steady: int = 5) -> dict:
    """A fresh server (``config``, loading the generator ``model`` alone): TTFT of the request sent at ready,
    then the steady TTFT."""
    started = time.perf_counter()
    with local_server(config) as server:
        ready_s = time.perf_counter() - started
        first = run_streams(config.grpc_url, model, [PROMPTS[0]], 4)["ttft_mean"]
        later = [
            run_streams(config.grpc_url, model, [PROMPTS[i % len(PROMPTS)]], 4)["ttft_mean"]
            for i in range(1, steady + 1)
        ]
        if server.stop():
            raise RuntimeError("the server left processes or /dev/shm regions behind")
    median = statistics.median(later)
    return {"ready_s": ready_s, "first_s": first, "steady_s": median, "ratio": first / median}


# -- report --------------------------------------------------------------------------------------------
def verdict(ratio: float, threshold: float, at_least: bool = True) -> str:
    met = ratio >= threshold if at_least else ratio <= threshold
    return f"{'met' if met else 'MISSED'} ({'>=' if at_least else '<='} {threshold:g})"


def throughput_line(n: int, inproc: dict, served: dict) -> str:
    ratio = served["tokens_per_s"] / inproc["tokens_per_s"]
    target = verdict(ratio, TARGETS[n]) if n in TARGETS else "no target"
    return (
        f"| {n} | {inproc['step_ms']:.1f} | {inproc['tokens_per_s']:.1f} | {served['step_ms']:.1f} | "
        f"{served['tokens']} | {served['wall']:.2f} | {served['ttft_mean']:.3f} | {served['tokens_per_s']:.1f} | "
        f"{ratio:.2f} | {target} |"
    )


GENAI_STATS = {"avg": "mean", "p50": "p50", "p99": "p99"}
GENAI_HEADER = (
    "| streams | "
    + " | ".join(f"{name} {k} ms" for name in ("time_to_first_token", "inter_token_latency") for k in GENAI_STATS)
    + " | output_token_throughput tokens/s | output tokens |"
)
GENAI_NOTE = (
    "The served streams above in GenAI-Perf's terms, as tritonkit loadtest computes them (loadtest/core/streams.py):"
    " TTFT to the first response with text, ITL a request's mean gap between them, tokens/s over the wall time."
)


def genai_line(n: int, served: dict) -> str:
    """One served row's stream figures (``stream_summary``), in GenAI-Perf's names (``GENAI_HEADER``)."""
    s = served["streams"]
    cells = [f"{s[f][k]:.2f}" if k in s[f] else "n/a" for f in ("ttft_ms", "itl_ms") for k in GENAI_STATS.values()]
    return f"| {n} | {' | '.join(cells)} | {s['output_token_throughput']:.1f} | {s['output_tokens']} |"


def first_request_line(label: str, r: dict) -> str:
    return (
        f"| {label} | {r['ready_s']:.1f} | {r['first_s']:.3f} | {r['steady_s']:.3f} | {r['ratio']:.2f} | "
        f"{verdict(r['ratio'], FIRST_REQUEST_MAX, at_least=False)} |"
    )


class Generation(Study):
    name = "bench-generation"
    help = "streaming generation: served in-flight batching vs the batched step in-process; TTFT, warmup"
    alias = "python -m loadtest.studies.generation"

    def arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--tokens", type=int, default=64, help="tokens generated per stream (MAX_TOKENS)")
        parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32], help="concurrent stream counts")
        # its own server on a repository of its own: only the CPU split of the server flags
        flags.add_server_flags(parser, repository=False, urls=False, split=True)
        parser.add_argument("--no-step-modes", action="store_true", help="skip the BLS vs in-process comparison")
        parser.add_argument("--no-first-request", action="store_true", help="skip the warmup on/off first-request rows")
        parser.add_argument(
            "--tiny", action="store_true", help="the 2-layer random-weight steps (a quick code-path run)"
        )

    def run(self, args: argparse.Namespace) -> int | None:
        """Its tables are printed row by row as they are measured (a row takes minutes): no data is left over."""
        if args.tokens < 2 or any(n < 1 for n in args.streams):
            print("error: --tokens must be at least 2 and every --streams count at least 1", file=sys.stderr)
            return ExitStatus.USAGE
        try:
            run(args)
        except (DeployError, LoadTestError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ExitStatus.BROKEN
        return None

    def report(self, args: argparse.Namespace, data: None) -> int:
        return ExitStatus.OK


STUDY = Generation()
register, run_command, main = STUDY.register, STUDY.command, STUDY.main
"""``main``: ``python -m loadtest.studies.generation``, the same command as ``tritonkit bench-generation``."""


def run(args: argparse.Namespace) -> None:
    client_cpus, server_cpus = flags.resolve_cpus(args)
    threads = len(server_cpus or os.sched_getaffinity(0))  # the generator's default INTRA_OP_THREAD_COUNT
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import torch

    with tempfile.TemporaryDirectory(prefix="generation-bench-") as root:
        repo = make_repository(Path(root), args.tiny)
        http, grpc, metrics = free_ports()
        config = ServerConfig(
            model_repository=repo,
            http_port=http,
            grpc_port=grpc,
            metrics_port=metrics,
            exit_timeout_s=10,
            cpus=server_cpus,
        )
        models = ("text_generator",) + (() if args.no_step_modes else ("text_generator_bls",) + steps_of(args.tiny))
        optimised = "on" if generator_optimized() else "off"
        print(
            f"torch {torch.__version__}; server and stubs on CPUs {sorted(server_cpus) or 'all'} ({threads} torch "
            f"threads, optimised execution {optimised}), load generator on CPUs {sorted(client_cpus) or 'all'}; "
            f"{'tiny random-weight steps' if args.tiny else 'SmolLM2-135M FP32'}, greedy, {args.tokens} tokens per "
            f"stream, gRPC streaming\n",
            flush=True,
        )
        affinity = os.sched_getaffinity(0)
        inproc = InProcess(args.tiny, server_cpus, threads)
        try:
            with local_server(dataclasses.replace(config, load_models=models)) as server:
                if client_cpus:
                    os.sched_setaffinity(0, client_cpus)
                print(
                    "| streams | in-process step ms | in-process tokens/s | served step ms (log) | served tokens | "
                    "wall s | mean TTFT s | served tokens/s | served / in-process | target |"
                )
                print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
                genai = []
                for n in args.streams:
                    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n)]
                    in_row = inproc.row(prompts, args.tokens)
                    run_streams(config.grpc_url, "text_generator", prompts, 4)  # as the in-process row warms
                    served = served_row(server, "text_generator", prompts, args.tokens)
                    print(throughput_line(n, in_row, served), flush=True)
                    genai.append(genai_line(n, served))
                print(f"\n{GENAI_NOTE}\n\n{GENAI_HEADER}\n|{'---|' * 9}")
                print("\n".join(genai), flush=True)
                if not args.no_step_modes:
                    print(
                        "\n| step mode | prompt tokens | median decode step ms (server log) | tokens/s (one stream) |"
                    )
                    print("|---|---|---|---|")
                    for prompt, label in ((PROMPTS[0], "~10"), (LONG_PROMPT, "~300")):
                        for model, mode in (("text_generator", "in-process"), ("text_generator_bls", "BLS")):
                            r = served_row(server, model, [prompt], args.tokens)
                            print(f"| {mode} | {label} | {r['step_ms']:.2f} | {r['tokens_per_s']:.1f} |", flush=True)
        finally:
            os.sched_setaffinity(0, affinity)
        if not args.no_first_request:
            alone = {
                m: dataclasses.replace(config, load_models=(m,)) for m in ("text_generator", "text_generator_cold")
            }
            if client_cpus:
                os.sched_setaffinity(0, client_cpus)
            try:
                on = first_request(alone["text_generator"], "text_generator")
                off = first_request(alone["text_generator_cold"], "text_generator_cold")
            finally:
                os.sched_setaffinity(0, affinity)
            warm_rows = [("on (WARMUP true)", on), ("off (WARMUP false)", off)]
            print("\n| warmup | ready s | first request TTFT s | steady TTFT s | first / steady | target |")
            print("|---|---|---|---|---|---|")
            for label, r in warm_rows:
                print(first_request_line(label, r), flush=True)


if __name__ == "__main__":
    sys.exit(main())
