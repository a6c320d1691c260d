"""Closed-loop gRPC load: ``processes x threads`` clients each send one request after another.

Runs in worker processes started with ``spawn`` (the parent may hold a CUDA context and gRPC does
not survive ``fork``), so this module imports only numpy, tritonclient and the project's (light)
percentile rule. Every client starts at the same wall-clock instant; a response counts when it
completes inside the measuring window.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

import numpy as np

from loadtest.drive.client_stats import percentiles


def _client_loop(url: str, model: str, inputs: dict, start_at: float, stop_at: float, out: list) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    client = grpcclient.InferenceServerClient(url)
    request = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        request.append(tensor)
    client.is_server_ready()  # open the channel before the window starts
    done, errors, latencies = 0, 0, []
    time.sleep(max(0.0, start_at - time.time()))
    while True:
        t0 = time.time()
        if t0 >= stop_at:
            break
        try:
            client.infer(model, request)
        except Exception:  # noqa: BLE001 - counted, reported by the parent
            errors += 1
            continue
        t1 = time.time()
        if t1 <= stop_at:
            done += 1
            latencies.append(t1 - t0)
    client.close()
    out.append((done, errors, latencies))


def _process(url: str, model: str, inputs: dict, threads: int, start_at: float, stop_at: float, queue) -> None:
    out: list = []
    workers = [
        threading.Thread(target=_client_loop, args=(url, model, inputs, start_at, stop_at, out)) for _ in range(threads)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    queue.put(out)


def run(
    url: str,
    model: str,
    inputs: dict[str, np.ndarray],
    concurrency: int,
    seconds: float,
    processes: int,
    start_delay_s: float = 3.0,
) -> dict:
    """Requests per second, items per second, latency percentiles and errors over the window."""
    processes = max(1, min(processes, concurrency))
    per_process = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    start_at = time.time() + start_delay_s
    stop_at = start_at + seconds
    procs = [
        context.Process(target=_process, args=(url, model, inputs, n, start_at, stop_at, queue), daemon=True)
        for n in per_process
    ]
    for p in procs:
        p.start()
    collected = []
    for _ in procs:
        collected.extend(queue.get(timeout=start_delay_s + seconds + 120))
    for p in procs:
        p.join(timeout=30)
    done = sum(c[0] for c in collected)
    errors = sum(c[1] for c in collected)
    latencies = [x for c in collected for x in c[2]]
    batch = int(next(iter(inputs.values())).shape[0])
    p50, p99 = percentiles(latencies, (50.0, 99.0)) if latencies else (None, None)
    return {
        "concurrency": concurrency,
        "processes": processes,
        "seconds": seconds,
        "requests": done,
        "errors": errors,
        "requests_per_s": done / seconds,
        "items_per_s": done * batch / seconds,
        "p50_ms": p50 * 1e3 if latencies else None,
        "p99_ms": p99 * 1e3 if latencies else None,
    }
