"""The hand-written alternative to Triton: the exported file (TorchScript or ONNX) behind FastAPI + uvicorn, JSON
in and out.

This is what a user typically writes instead of deploying Triton, so ``make bench`` measures it
under the same load as the server:

* per-request mode (default): a plain ``def`` endpoint, which FastAPI runs in its thread pool, calls
  the model once per HTTP request;
* batcher mode (``batcher=True``): an ``async`` endpoint hands each request to a home-made asyncio
  micro-batcher (:class:`MicroBatcher`) that runs one forward for up to ``max_batch`` rows or
  ``max_wait_ms`` of waiting, in one worker thread.

Contract (the Locust user is written against it):

* ``POST /infer`` with ``{"inputs": {"NAME": <nested list, batch first>}}`` answers
  ``{"outputs": {"NAME": <nested list>}}``; malformed JSON or a body without ``inputs`` is a 422
  (FastAPI's validation), a missing/unknown input, a ragged list, mismatched batch sizes or an input
  the model refuses is a 400 with a message;
* ``GET /health`` answers 200 once the module is loaded;
* ``GET /stats`` (extra) says how many forwards ran and how many rows they carried.

Input dtypes: taken from the model's ``config.pbtxt`` when started through :func:`main`; otherwise
fixed per input by its first use (JSON floats -> float32, JSON integers -> int64) and later requests
are cast to that dtype (a float where integers are expected is refused).

Threads: torch's (or onnxruntime's) own default (all cores it may use) unless ``threads`` is given; that is what
a user gets. ``serve_in_subprocess(cpus=...)`` pins the process to the cores a measurement gives it.

Run: ``python -m loadtest.studies.bench.baselines --model digits [--batcher] [--port 8080] [--workers 1]``.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from deploy.server import DEFAULT_REPOSITORY, PROJECT_ROOT
from loadtest.probes.inprocess import ExportedModel, model_file

ENV_PREFIX = "TRITONKIT_BASELINE_"


class BadRequest(ValueError):
    """Something wrong with one request; answered 400 with this message."""


class InferRequest(BaseModel):
    inputs: dict[str, Any]


# -- the model ------------------------------------------------------------------------------------
class Predictor(ExportedModel):
    """The exported file called with numpy arrays by name (``loadtest.probes.inprocess.ExportedModel``);
    thread-safe (torch and onnxruntime are)."""


class InputDecoder:
    """JSON nested lists -> numpy arrays of the right dtype, batch first, one batch size for all."""

    def __init__(self, input_names: list[str], dtypes: dict[str, Any] | None = None):
        self.input_names = list(input_names)
        self.dtypes: dict[str, np.dtype] = {k: np.dtype(v) for k, v in (dtypes or {}).items()}
        self._lock = threading.Lock()

    def __call__(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in inputs]
        unknown = sorted(set(inputs) - set(self.input_names))
        if missing or unknown:
            raise BadRequest(f"inputs must be exactly {self.input_names}; missing {missing}, unknown {unknown}")
        arrays = {}
        for name in self.input_names:
            try:
                raw = np.asarray(inputs[name])
            except (ValueError, TypeError) as exc:
                raise BadRequest(f"input {name!r} is not a rectangular nested list: {exc}") from None
            arrays[name] = self._typed(name, raw)
        rows = {a.shape[0] for a in arrays.values()}
        if len(rows) != 1:
            raise BadRequest(f"inputs have different batch sizes: { {n: a.shape[0] for n, a in arrays.items()} }")
        if rows == {0}:
            raise BadRequest("empty batch")
        return arrays

    def _typed(self, name: str, raw: np.ndarray) -> np.ndarray:
        if raw.ndim < 1:
            raise BadRequest(f"input {name!r} must be a list (batch first), got a scalar")
        if raw.dtype.kind not in "biuf":
            raise BadRequest(f"input {name!r} must hold numbers, got {raw.dtype.kind!r} data")
        with self._lock:
            if name not in self.dtypes:  # first use fixes it
                self.dtypes[name] = np.dtype(np.float32 if raw.dtype.kind == "f" else np.int64)
            dtype = self.dtypes[name]
        if raw.dtype.kind == "f" and dtype.kind in "biu":
            raise BadRequest(f"input {name!r} takes integers ({dtype}), got floats")
        return raw.astype(dtype, copy=False)


def _model_error(exc: Exception) -> HTTPException:
    # TorchScript errors carry the scripted traceback; the last line says what was wrong.
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = (lines[-1] if lines else "")[:600]
    return HTTPException(status_code=400, detail=f"the model refused the input: {type(exc).__name__}: {text}")


# -- the micro-batcher ----------------------------------------------------------------------------
@dataclasses.dataclass
class _Pending:
    arrays: dict[str, np.ndarray]
    future: asyncio.Future
    key: tuple
    rows: int


class MicroBatcher:
    """Requests -> one forward per batch: up to ``max_batch`` rows or ``max_wait_ms`` after the first.

    Only requests whose non-batch shapes and dtypes match go together; a request that does not match
    the batch being formed is kept, in order, for the next batch. Forwards run one at a time in one
    worker thread (``run_in_executor``); while one runs, the next batch forms. A request larger than
    ``max_batch`` runs alone. If a batch of several requests fails, each is retried alone so one bad
    request does not fail the others.
    """

    def __init__(self, predict, max_batch: int = 32, max_wait_ms: float = 2.0):
        if max_batch < 1:
            raise ValueError(f"max_batch={max_batch} must be >= 1")
        self.predict = predict
        self.max_batch = int(max_batch)
        self.max_wait_s = max(0.0, float(max_wait_ms)) / 1000.0
        self.batches = 0
        self.requests = 0
        self.rows = 0
        self._queue: asyncio.Queue | None = None
        self._carry: collections.deque[_Pending] = collections.deque()
        self._getter: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    # lifecycle, inside the event loop
    def start(self) -> None:
        self._queue = asyncio.Queue()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="microbatch")
        self._task = asyncio.get_running_loop().create_task(self._collect())

    async def stop(self) -> None:
        for task in (self._task, self._getter):
            if task is not None:
                task.cancel()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        leftovers = list(self._carry)
        while self._queue is not None and not self._queue.empty():
            leftovers.append(self._queue.get_nowait())
        for item in leftovers:
            if not item.future.done():
                item.future.set_exception(RuntimeError("server shutting down"))
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self._task = self._getter = None

    async def submit(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._queue is None:
            raise RuntimeError("MicroBatcher.start() was not called")
        future = asyncio.get_running_loop().create_future()
        key = tuple((name, a.shape[1:], a.dtype.str) for name, a in arrays.items())
        rows = next(iter(arrays.values())).shape[0]
        self._queue.put_nowait(_Pending(arrays, future, key, rows))
        return await future

    @property
    def mean_batch_rows(self) -> float:
        return self.rows / self.batches if self.batches else 0.0

    # the background task
    async def _next(self, timeout: float | None) -> _Pending | None:
        """The next queued request, or None after ``timeout`` s (None: wait for ever) without one.

        The pending ``queue.get()`` is kept across calls rather than cancelled, so no item is lost.
        """
        if self._getter is None:
            try:
                return self._queue.get_nowait()
            except asyncio.QueueEmpty:
                pass
            if timeout is not None and timeout <= 0:
                return None
            self._getter = asyncio.ensure_future(self._queue.get())
        if timeout is not None and timeout <= 0:
            if not self._getter.done():
                return None
        else:
            done, _ = await asyncio.wait({self._getter}, timeout=timeout)
            if not done:
                return None
        item, self._getter = self._getter.result(), None
        return item

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = self._carry.popleft() if self._carry else await self._next(None)
            batch, rows = [first], first.rows
            deadline = loop.time() + self.max_wait_s
            kept: collections.deque[_Pending] = collections.deque()
            while self._carry:  # earlier arrivals first
                item = self._carry.popleft()
                if item.key == first.key and rows + item.rows <= self.max_batch:
                    batch.append(item)
                    rows += item.rows
                else:
                    kept.append(item)
            self._carry = kept
            while rows < self.max_batch:
                item = await self._next(deadline - loop.time())
                if item is None:
                    break
                if item.key == first.key and rows + item.rows <= self.max_batch:
                    batch.append(item)
                    rows += item.rows
                else:
                    self._carry.append(item)
                    if item.key == first.key:  # same shape but no room: the batch is full
                        break
            await self._run(batch, loop)

    async def _run(self, batch: list[_Pending], loop) -> None:
        live = [item for item in batch if not item.future.done()]  # a cancelled client is skipped
        if not live:
            return
        try:
            outputs = await loop.run_in_executor(self._executor, self._forward, live)
        except Exception as exc:  # noqa: BLE001 - answered per request below
            if len(live) == 1:
                _settle(live[0].future, exc=exc)
                return
            for item in live:  # isolate the request that fails
                await self._run([item], loop)
            return
        for item, out in zip(live, outputs, strict=True):
            _settle(item.future, result=out)

    def _forward(self, batch: list[_Pending]) -> list[dict[str, np.ndarray]]:
        names = list(batch[0].arrays)
        joined = {
            n: batch[0].arrays[n] if len(batch) == 1 else np.concatenate([b.arrays[n] for b in batch]) for n in names
        }
        total = sum(b.rows for b in batch)
        outputs = self.predict(joined)
        for name, out in outputs.items():
            if out.ndim == 0 or out.shape[0] != total:
                raise RuntimeError(f"output {name!r} has shape {out.shape}, not {total} rows first")
        self.batches += 1
        self.requests += len(batch)
        self.rows += total
        split, start = [], 0
        for item in batch:
            split.append({n: out[start : start + item.rows] for n, out in outputs.items()})
            start += item.rows
        return split


def _settle(future: asyncio.Future, result=None, exc: Exception | None = None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


# -- the app --------------------------------------------------------------------------------------
def create_app(
    model_path: Path,
    input_names: list[str],
    output_names: list[str],
    *,
    batcher: bool = False,
    max_batch: int = 32,
    max_wait_ms: float = 2.0,
    threads: int | None = None,
    input_dtypes: dict[str, Any] | None = None,
) -> FastAPI:
    """The FastAPI app serving ``model_path`` (TorchScript or ONNX) on ``POST /infer``; see the module doc."""
    predictor = Predictor(Path(model_path), input_names, output_names, threads)
    decode = InputDecoder(input_names, input_dtypes)
    micro = MicroBatcher(predictor, max_batch, max_wait_ms) if batcher else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if micro is not None:
            micro.start()
        try:
            yield
        finally:
            if micro is not None:
                await micro.stop()

    app = FastAPI(title=f"TorchScript baseline: {Path(model_path).parent.parent.name}", lifespan=lifespan)
    app.state.predictor, app.state.batcher = predictor, micro
    stats, stats_lock = {"requests": 0}, threading.Lock()

    def count() -> None:
        with stats_lock:
            stats["requests"] += 1

    def respond(outputs: dict[str, np.ndarray]) -> JSONResponse:
        return JSONResponse({"outputs": {name: out.tolist() for name, out in outputs.items()}})

    if micro is None:

        @app.post("/infer")
        def infer(request: InferRequest):  # plain def: FastAPI runs it in its thread pool
            try:
                arrays = decode(request.inputs)
            except BadRequest as exc:
                raise HTTPException(status_code=400, detail=str(exc)) from None
            try:
                outputs = predictor(arrays)
            except RuntimeError as exc:
                raise _model_error(exc) from None
            count()
            return respond(outputs)
    else:

        @app.post("/infer")
        async def infer(request: InferRequest):
            try:
                arrays = decode(request.inputs)
            except BadRequest as exc:
                raise HTTPException(status_code=400, detail=str(exc)) from None
            try:
                outputs = await micro.submit(arrays)
            except RuntimeError as exc:
                raise _model_error(exc) from None
            count()
            return respond(outputs)

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/stats")
    def get_stats():
        if micro is None:
            return {"mode": "per-request", "requests": stats["requests"], "forwards": stats["requests"]}
        return {
            "mode": "batcher",
            "requests": stats["requests"],
            "forwards": micro.batches,
            "rows": micro.rows,
            "mean_batch_rows": round(micro.mean_batch_rows, 3),
            "max_batch": micro.max_batch,
            "max_wait_ms": micro.max_wait_s * 1000,
        }

    return app


def app_for_model(
    model: str,
    repository: Path = DEFAULT_REPOSITORY,
    *,
    batcher: bool = False,
    max_batch: int | None = None,
    max_wait_ms: float = 2.0,
    threads: int | None = None,
) -> FastAPI:
    spec = model_file(model, repository)
    return create_app(
        spec.model_path,
        spec.input_names,
        spec.output_names,
        batcher=batcher,
        max_batch=max_batch or spec.max_batch_size or 32,
        max_wait_ms=max_wait_ms,
        threads=threads,
        input_dtypes=spec.input_dtypes,
    )


def app_from_env() -> FastAPI:
    """uvicorn factory for ``--workers N`` (each worker process builds its own app from the env)."""
    env = os.environ
    return app_for_model(
        env[ENV_PREFIX + "MODEL"],
        Path(env[ENV_PREFIX + "REPOSITORY"]),
        batcher=env.get(ENV_PREFIX + "BATCHER") == "1",
        max_batch=int(env.get(ENV_PREFIX + "MAX_BATCH") or 0) or None,
        max_wait_ms=float(env.get(ENV_PREFIX + "MAX_WAIT_MS") or 2.0),
        threads=int(env.get(ENV_PREFIX + "THREADS") or 0) or None,
    )


# -- running it in a subprocess -------------------------------------------------------------------
def serve_in_subprocess(
    model: str,
    port: int,
    batcher: bool = False,
    repository: Path = DEFAULT_REPOSITORY,
    *,
    workers: int = 1,
    threads: int | None = None,
    max_batch: int | None = None,
    max_wait_ms: float = 2.0,
    timeout_s: float = 90.0,
    cpus: frozenset[int] | None = None,
) -> subprocess.Popen:
    """Start the baseline on 127.0.0.1:``port`` (pinned to ``cpus`` when given) and return once ``GET /health``
    answers 200.

    The process runs in its own session (its workers with it); stop it with :func:`stop_subprocess`.
    Its output goes to ``proc.log_path``. If it exits or is not healthy within ``timeout_s``, it is
    stopped and a RuntimeError carries the tail of its output.
    """
    cmd = [
        sys.executable,
        "-m",
        "loadtest.studies.bench.baselines",
        "--model",
        model,
        "--port",
        str(port),
        "--repository",
        str(Path(repository).resolve()),
        "--workers",
        str(workers),
        "--max-wait-ms",
        str(max_wait_ms),
    ]
    if batcher:
        cmd.append("--batcher")
    if threads:
        cmd += ["--threads", str(threads)]
    if max_batch:
        cmd += ["--max-batch", str(max_batch)]
    fd, log_name = tempfile.mkstemp(prefix=f"baseline-{model}-", suffix=".log")
    with os.fdopen(fd, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=PROJECT_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
    proc.log_path = Path(log_name)
    url = f"http://127.0.0.1:{port}/health"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the baseline exited with code {proc.returncode} before it was healthy:\n{_tail(proc.log_path)}"
                )
            if _healthy(url):
                return proc
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the baseline was not healthy at {url} within {timeout_s:.0f} s:\n{_tail(proc.log_path)}"
                )
            time.sleep(0.2)
    except BaseException:  # a stop signal (SystemExit) while it starts too: the caller never gets its handle
        stop_subprocess(proc)
        raise


def stop_subprocess(proc: subprocess.Popen, timeout_s: float = 15.0) -> int | None:
    """SIGTERM to the baseline's process group (uvicorn shuts down gracefully), SIGKILL if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    # workers (--workers > 1) share the group; take any that outlived the parent
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-chars:]
    except OSError:
        return "(no output)"
