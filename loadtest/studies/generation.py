"""Streaming generation benchmark: in-flight batching against one-after-another, and BLS against in-process steps.

    .venv/bin/python -m loadtest.studies.generation [--tokens 32] [--streams 1 4 8] [--no-step-modes]

Starts its own local tritonserver on free ports with a temporary repository holding the exported
real SmolLM2 steps (``model_repository/smollm2_prefill`` / ``smollm2_decode``, linked, exported first
if missing) and two generators: ``text_generator`` (steps run in-process) and ``text_generator_bls``
(a BLS request per step). For 1, 4 and 8 streams that arrive together (gRPC streaming, greedy,
``--tokens`` each) it measures time to first token from arrival and aggregate tokens/s, once
concurrently (they share decode steps) and once one after another. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import queue
import re
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from deploy.server import DEFAULT_REPOSITORY, LocalServer, ServerConfig, free_ports
from export import catalog

PROMPTS = (
    "The capital of France is",
    "Write a short story about a robot who learns to paint.",
    "Explain in simple words why the sky is blue.",
    "List three uses of a paperclip:",
    "Once upon a time, in a small village,",
    "The best way to learn a new language is",
    "Here is a recipe for pancakes:",
    "def fibonacci(n):",
)
LONG_PROMPT = " ".join(["The quick brown fox jumps over the lazy dog."] * 30)  # ~300 tokens
STEPS = ("smollm2_prefill", "smollm2_decode")


def make_repository(root: Path) -> Path:
    from export import pipeline  # torch

    repo = root / "repo"
    repo.mkdir()
    for name in STEPS:
        if not (DEFAULT_REPOSITORY / name / "1" / "model.pt").exists():
            for done in pipeline.export_entry(catalog.entry(name), DEFAULT_REPOSITORY):
                if not done.result.ok:
                    raise SystemExit(done.result.summary())
        (repo / name).symlink_to(DEFAULT_REPOSITORY / name, target_is_directory=True)
    for name, mode in (("text_generator", "inprocess"), ("text_generator_bls", "bls")):
        shutil.copytree(DEFAULT_REPOSITORY / "text_generator", repo / name, ignore=shutil.ignore_patterns("__pycache__"))
        config = (repo / name / "config.pbtxt").read_text().replace('name: "text_generator"', f'name: "{name}"')
        (repo / name / "config.pbtxt").write_text(config.replace('string_value: "inprocess"', f'string_value: "{mode}"'))
    return repo


def stream_one(url: str, model: str, prompt: str, tokens: int, t0: float, result: dict) -> None:
    """One gRPC stream; fills ``result`` with first-token and end times (from ``t0``) and the piece count."""
    events: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: events.put((time.perf_counter(), result, error)))
    inputs = [grpcclient.InferInput("PROMPT", [1], "BYTES"), grpcclient.InferInput("MAX_TOKENS", [1], "INT32")]
    inputs[0].set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    inputs[1].set_data_from_numpy(np.array([tokens], dtype=np.int32))
    result["sent"] = time.perf_counter() - t0
    client.async_stream_infer(model, inputs, enable_empty_final_response=True)
    pieces = 0
    try:
        while True:
            at, response, error = events.get(timeout=120)
            if error is not None:
                raise RuntimeError(error)
            body = response.get_response()
            if body.outputs:
                pieces += 1
                result.setdefault("first", at - t0)
            if body.parameters["triton_final_response"].bool_param:
                result["end"], result["pieces"] = at - t0, pieces
                result.setdefault("first", result["end"])  # ended at once (end of sequence first)
                return
    finally:
        client.stop_stream()
        client.close()


def run_streams(url: str, model: str, prompts: list[str], tokens: int, concurrent: bool) -> dict:
    results = [{} for _ in prompts]
    t0 = time.perf_counter()
    if concurrent:
        threads = [threading.Thread(target=stream_one, args=(url, model, p, tokens, t0, r))
                   for p, r in zip(prompts, results)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for p, r in zip(prompts, results):
            stream_one(url, model, p, tokens, t0, r)
    wall = max(r["end"] for r in results)
    total = sum(r["pieces"] for r in results)
    return {"ttft_mean": statistics.mean(r["first"] for r in results),
            "ttft_max": max(r["first"] for r in results), "tokens": total, "wall": wall, "tps": total / wall}


def median_step_ms(log: str, model: str) -> float | None:
    found = re.findall(rf"{model}: \d+ decode steps \(\w+\), median ([\d.]+) ms", log)
    return float(found[-1]) if found else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated per stream (MAX_TOKENS)")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--no-step-modes", action="store_true", help="skip the BLS vs in-process comparison")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="generation-bench-") as root:
        repo = make_repository(Path(root))
        http, grpc, metrics = free_ports()
        config = ServerConfig(model_repository=repo, http_port=http, grpc_port=grpc, metrics_port=metrics,
                              exit_timeout_s=10)
        with LocalServer(config) as server:
            url = config.grpc_url
            # Warm the TorchScript executors (they specialise on the first calls) at the batch sizes used.
            for n in sorted(set(args.streams)):
                run_streams(url, "text_generator", list(PROMPTS[:n]), 8, concurrent=True)
            run_streams(url, "text_generator", [PROMPTS[0]], 8, concurrent=False)
            import torch

            print(f"torch {torch.__version__}, {len(__import__('os').sched_getaffinity(0))} CPU cores, "
                  f"SmolLM2-135M fp32, greedy, {args.tokens} tokens per stream, gRPC streaming\n")
            print("| streams | served | mean TTFT s | max TTFT s | tokens | wall s | tokens/s |")
            print("|---|---|---|---|---|---|---|")
            for n in args.streams:
                prompts = [PROMPTS[i % len(PROMPTS)] for i in range(n)]
                for concurrent in (True, False):
                    r = run_streams(url, "text_generator", prompts, args.tokens, concurrent)
                    how = "together (in-flight batch)" if concurrent else "one after another"
                    print(f"| {n} | {how} | {r['ttft_mean']:.3f} | {r['ttft_max']:.3f} | {r['tokens']} | "
                          f"{r['wall']:.2f} | {r['tps']:.1f} |", flush=True)
            if not args.no_step_modes:
                print("\n| step mode | prompt tokens | median decode step ms (server) | tokens/s (one stream) |")
                print("|---|---|---|---|")
                for prompt, label in ((PROMPTS[0], "5"), (LONG_PROMPT, "~300")):
                    for model, mode in (("text_generator", "in-process"), ("text_generator_bls", "BLS")):
                        run_streams(url, model, [prompt], 4, concurrent=False)  # warm
                        r = run_streams(url, model, [prompt], args.tokens, concurrent=False)
                        time.sleep(0.5)
                        step = median_step_ms(server.log_text(), model)
                        print(f"| {mode} | {label} | {step:.2f} | {r['tps']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
