"""The FastAPI baseline's pieces (loadtest/studies/bench/baselines/fastapi_app.py) without a server: the micro-batcher
and the input decoder."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from loadtest.studies.bench.baselines.fastapi_app import BadRequest, InputDecoder, MicroBatcher, Predictor


def _run_batcher(predict, requests: list[dict], max_batch: int, max_wait_ms: float):
    async def go():
        batcher = MicroBatcher(predict, max_batch=max_batch, max_wait_ms=max_wait_ms)
        batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit(r) for r in requests), return_exceptions=True), batcher
        finally:
            await batcher.stop()

    return asyncio.run(go())


def test_the_batcher_groups_matching_shapes_and_splits_results_back(tiny_module):
    predictor = Predictor(tiny_module, ["x", "offset"], ["y"])
    seen = []

    def predict(arrays):
        seen.append({n: a.shape for n, a in arrays.items()})
        return predictor(arrays)

    rng = np.random.default_rng(0)
    requests = []
    for i in range(7):
        width = 4 if i % 3 else 3  # requests 0, 3, 6 have another shape
        rows = 1 + i % 2
        requests.append(
            {
                "x": rng.normal(size=(rows, width)).astype(np.float32),
                "offset": rng.integers(0, 5, size=(rows, 2)).astype(np.int64),
            }
        )
    results, batcher = _run_batcher(predict, requests, max_batch=32, max_wait_ms=50)
    for request, result in zip(requests, results, strict=True):
        expected = request["x"] * 2 + request["offset"].sum(axis=1, keepdims=True)
        np.testing.assert_allclose(result["y"], expected, rtol=1e-6)
    # one forward per shape, all requests of a shape in it
    # requests 0, 3, 6 (width 3) carry 1 + 2 + 1 rows; 1, 2, 4, 5 (width 4) carry 2 + 1 + 1 + 2
    assert sorted(s["x"] for s in seen) == [(4, 3), (6, 4)]
    assert batcher.batches == 2 and batcher.requests == 7 and batcher.rows == 10


def test_the_batcher_respects_max_batch_rows():
    sizes = []

    def predict(arrays):
        sizes.append(arrays["x"].shape[0])
        return {"y": arrays["x"] + 1}

    requests = [{"x": np.full((1, 2), i, dtype=np.float32)} for i in range(10)] + [
        {"x": np.zeros((6, 2), dtype=np.float32)}
    ]  # larger than max_batch: runs alone
    results, _ = _run_batcher(predict, requests, max_batch=4, max_wait_ms=20)
    assert sizes == [4, 4, 2, 6]
    for i in range(10):
        np.testing.assert_array_equal(results[i]["y"], np.full((1, 2), i + 1))
    assert results[10]["y"].shape == (6, 2)


def test_a_failing_request_fails_alone():
    def predict(arrays):
        if (arrays["x"] < 0).any():
            raise RuntimeError("negative input")
        return {"y": arrays["x"] * 3}

    requests = [{"x": np.array([[float(v)]], dtype=np.float32)} for v in (1, -1, 2)]
    results, batcher = _run_batcher(predict, requests, max_batch=8, max_wait_ms=20)
    assert isinstance(results[1], RuntimeError) and "negative" in str(results[1])
    assert results[0]["y"].tolist() == [[3.0]] and results[2]["y"].tolist() == [[6.0]]
    assert batcher.batches == 2  # the failed batch of 3 is not counted; the two retried alone are


def test_the_decoder_fixes_dtypes_at_first_use_and_refuses_bad_input():
    decode = InputDecoder(["PIXELS", "ids"])
    first = decode({"PIXELS": [[0.5, 1.0]], "ids": [[1, 2]]})
    assert first["PIXELS"].dtype == np.float32 and first["ids"].dtype == np.int64
    later = decode({"PIXELS": [[1, 2]], "ids": [[3, 4]]})  # integers for a float input: cast
    assert later["PIXELS"].dtype == np.float32
    with pytest.raises(BadRequest, match="takes integers"):
        decode({"PIXELS": [[1.0, 2.0]], "ids": [[1.5, 2.0]]})
    with pytest.raises(BadRequest, match="rectangular"):
        decode({"PIXELS": [[1.0], [1.0, 2.0]], "ids": [[1], [2]]})
    with pytest.raises(BadRequest, match="batch sizes"):
        decode({"PIXELS": [[1.0]], "ids": [[1], [2]]})
    with pytest.raises(BadRequest, match="missing"):
        decode({"PIXELS": [[1.0]]})
    with pytest.raises(BadRequest, match="numbers"):
        decode({"PIXELS": [["a"]], "ids": [[1]]})
    with pytest.raises(BadRequest, match="scalar"):
        decode({"PIXELS": 1.0, "ids": [[1]]})
    given = InputDecoder(["ids"], {"ids": np.int64})
    assert given({"ids": [[1, 2]]})["ids"].dtype == np.int64
