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

from loadtest.core.client_stats import percentiles


def _client_loop(url: str, model: str, inputs: dict, start_at: float, stop_at: float, out: list) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    client = grpcclient.InferenceServerClient(url)
    request = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        request.append(tensor)
    try:
        client.is_server_ready()  # open the channel before the window starts
    except Exception as exc:  # noqa: BLE001 - the server went away first (a stop signal): one error, no traceback
        client.close()
        out.append((0, 1, [], 0, [f"{type(exc).__name__}: {str(exc).strip()[:200]}"]))
        return
    done, errors, rejected, latencies, messages = 0, 0, 0, [], set()
    time.sleep(max(0.0, start_at - time.time()))
    while True:
        t0 = time.time()
        if t0 >= stop_at:
            break
        try:
            client.infer(model, request)
        except Exception as exc:  # noqa: BLE001 - counted, reported by the parent
            if is_rejection(exc):
                rejected += 1
            else:
                errors += 1
            if len(messages) < 3:
                messages.add(f"{type(exc).__name__}: {str(exc).strip()[:200]}")
            continue
        t1 = time.time()
        if t1 <= stop_at:
            done += 1
            latencies.append(t1 - t0)
    client.close()
    out.append((done, errors, latencies, rejected, sorted(messages)))


REJECTIONS = ("Request timeout expired", "Exceeds maximum queue size")
"""What Triton answers (UNAVAILABLE) when a model's queue policy refuses a request: its queue was full, or the
request waited longer than ``default_timeout_us`` with ``timeout_action: REJECT``."""


def is_rejection(exc: Exception) -> bool:
    """A request the model's queue policy refused by design (overload), not a failure of the serving path."""
    status = getattr(exc, "status", None)
    status = status() if callable(status) else status
    text = str(exc)
    return any(r in text for r in REJECTIONS) and (status is None or "UNAVAILABLE" in str(status))


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
    rejected = sum(c[3] for c in collected)
    messages = sorted({m for c in collected for m in c[4]})[:5]
    batch = int(next(iter(inputs.values())).shape[0])
    p50, p99 = percentiles(latencies, (50.0, 99.0)) if latencies else (None, None)
    return {
        "concurrency": concurrency,
        "processes": processes,
        "seconds": seconds,
        "requests": done,
        "errors": errors,
        "rejected": rejected,
        "error_messages": messages,
        "requests_per_s": done / seconds,
        "items_per_s": done * batch / seconds,
        "p50_ms": p50 * 1e3 if latencies else None,
        "p99_ms": p99 * 1e3 if latencies else None,
    }
