"""The bench pieces without a server: perf_analyzer CSV and input data, the micro-batcher, the in-process limit."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from deploy.server import DEFAULT_REPOSITORY
from loadtest.drive import perf
from loadtest.drive.payloads import PayloadOptions
from loadtest.errors import PayloadError
from loadtest.measure.first_request import _serving_repository, members, payload_for
from loadtest.measure.inprocess import ModelFile, limit, model_file
from loadtest.studies.baselines.fastapi_app import BadRequest, InputDecoder, MicroBatcher, Predictor

PERF_DATA = Path(__file__).resolve().parent.parent / "data" / "perf"


# -- perf_analyzer --------------------------------------------------------------------------------
def test_parse_a_recorded_perf_analyzer_csv():
    # Recorded from `perf_analyzer -m digits -i grpc -b 1 --concurrency-range 1:4:3 --input-data ...`
    # against the local tritonserver 2.51 (digits test rows as input data).
    rows = perf.parse_csv((PERF_DATA / "digits_grpc_b1_c1-4.csv").read_text())
    assert [r.concurrency for r in rows] == [1, 4]
    first, second = rows
    assert first.throughput == pytest.approx(474.194)
    assert (first.p50_ms, first.p90_ms, first.p95_ms, first.p99_ms) == pytest.approx((1.952, 2.358, 2.711, 5.545))
    assert first.server_queue_ms == pytest.approx(1.145)
    assert first.server_compute_infer_ms == pytest.approx(0.519)
    assert first.client_send_ms == pytest.approx(0.004) and first.client_recv_ms == pytest.approx(0.001)
    assert first.network_server_send_recv_ms == pytest.approx(0.305)
    assert first.avg_ms is None and first.extra == {}
    assert second.throughput == pytest.approx(1420.96) and second.p99_ms == pytest.approx(7.277)


def test_parse_a_recorded_verbose_csv_keeps_the_extra_columns():
    # Recorded with `-i http -b 4 --concurrency-range 2 --verbose-csv`.
    (row,) = perf.parse_csv((PERF_DATA / "digits_http_b4_c2_verbose.csv").read_text())
    assert row.concurrency == 2 and row.throughput == pytest.approx(4074.81)
    assert row.avg_ms == pytest.approx(1.954)
    assert row.extra == {"request/response": 61.0, "response wait": 1884.0}


def test_parse_ignores_a_trailing_metrics_block_and_refuses_other_files():
    text = (PERF_DATA / "digits_grpc_b1_c1-4.csv").read_text() + "\n\nConcurrency,Avg GPU Utilization\n1,gpu0:0;\n"
    assert len(perf.parse_csv(text)) == 2
    with pytest.raises(ValueError, match="not a perf_analyzer concurrency or request-rate CSV"):
        perf.parse_csv("Batch,Inferences/Second\n10,10\n")
    (rate,) = perf.parse_csv("Request Rate,Inferences/Second,p99 latency\n800,795.5,2500\n")
    assert rate.concurrency == 0 and rate.extra["Request Rate"] == 800 and rate.p99_ms == 2.5
    with pytest.raises(ValueError, match="no rows"):
        perf.parse_csv("Concurrency,Inferences/Second\n")


def test_write_input_data_is_perf_analyzers_format(tmp_path):
    # batch-1 payloads, batch dim first: perf_analyzer takes one item per entry, the batch dim dropped
    samples = [
        {"input_ids": np.array([[101, 2023, 102, 0]], dtype=np.int64), "attention_mask": np.array([[1, 1, 1, 0]])},
        {"input_ids": np.array([[101, 7592, 999, 102]]), "attention_mask": np.ones((1, 4), dtype=np.int64)},
    ]
    path = perf.write_input_data(tmp_path / "in.json", samples)
    data = json.loads(path.read_text())
    assert list(data) == ["data"] and len(data["data"]) == 2
    assert data["data"][0]["input_ids"] == {"content": [101, 2023, 102, 0], "shape": [4]}
    assert data["data"][1]["attention_mask"] == {"content": [1, 1, 1, 1], "shape": [4]}
    assert all(isinstance(v, int) for v in data["data"][0]["input_ids"]["content"])

    pixels = (np.arange(64, dtype=np.float32).reshape(1, 8, 8) / 4)
    data = json.loads(perf.write_input_data(tmp_path / "px.json", [{"PIXELS": pixels}]).read_text())
    assert data["data"][0]["PIXELS"]["shape"] == [8, 8]
    assert data["data"][0]["PIXELS"]["content"][:3] == [0.0, 0.25, 0.5]
    # an unbatched model's samples keep every dim; BYTES go as strings
    unbatched = {"name": "g", "max_batch_size": 0, "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}]}
    data = json.loads(perf.write_input_data(tmp_path / "t.json", [{"TEXT": np.array([b"hi"], dtype=object)}],
                                            unbatched).read_text())
    assert data["data"][0]["TEXT"] == {"content": ["hi"], "shape": [1]}
    with pytest.raises(ValueError):
        perf.write_input_data(tmp_path / "x.json", [])


def _fake_binary(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "perf_analyzer"
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_run_builds_the_command_and_parses_what_perf_analyzer_writes(tmp_path):
    csv_text = (PERF_DATA / "digits_grpc_b1_c1-4.csv").read_text()
    (tmp_path / "recorded.csv").write_text(csv_text)
    # Copies the recorded CSV to the -f argument and records its arguments.
    binary = _fake_binary(tmp_path, f'echo "$@" > {tmp_path}/args\n'
                                    'while [ $# -gt 0 ]; do if [ "$1" = -f ]; then '
                                    f'cp {tmp_path}/recorded.csv "$2"; fi; shift; done\n')
    result = perf.run("digits", "127.0.0.1:8001", concurrency=(1, 4, 3), batch_size=2,
                      input_data=tmp_path / "in.json", shapes={"input_ids": [32]}, measurement_ms=1500,
                      binary=binary)
    args = (tmp_path / "args").read_text().split()
    assert args[:8] == ["-m", "digits", "-u", "127.0.0.1:8001", "-i", "grpc", "-b", "2"]
    assert "--concurrency-range" in args and args[args.index("--concurrency-range") + 1] == "1:4:3"
    assert args[args.index("--measurement-interval") + 1] == "1500"
    assert args[args.index("--input-data") + 1] == str(tmp_path / "in.json")
    assert args[args.index("--shape") + 1] == "input_ids:32"
    assert [r.concurrency for r in result.rows] == [1, 4] and result.best.concurrency == 4
    assert result.csv_text == csv_text


def test_a_failed_run_raises_with_the_output_tail(tmp_path):
    binary = _fake_binary(tmp_path, 'echo "Request concurrency: 2"\n'
                                    'echo "Failed to obtain stable measurement." >&2\nexit 2\n')
    with pytest.raises(perf.PerfAnalyzerError) as info:
        perf.run("minilm", "127.0.0.1:1", concurrency=2, binary=binary)
    assert "exited with code 2" in str(info.value) and "Failed to obtain stable measurement." in str(info.value)
    with pytest.raises(perf.PerfAnalyzerError, match="make setup"):
        perf.run("digits", "127.0.0.1:1", binary=tmp_path / "missing")


# -- the micro-batcher ----------------------------------------------------------------------------
class _Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        return x * 2.0 + offset.to(x.dtype).sum(dim=1, keepdim=True)


@pytest.fixture(scope="module")
def tiny_module(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "model.pt"
    torch.jit.script(_Scale()).save(str(path))
    return path


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
        requests.append({"x": rng.normal(size=(rows, width)).astype(np.float32),
                         "offset": rng.integers(0, 5, size=(rows, 2)).astype(np.int64)})
    results, batcher = _run_batcher(predict, requests, max_batch=32, max_wait_ms=50)
    for request, result in zip(requests, results):
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
        {"x": np.zeros((6, 2), dtype=np.float32)}]  # larger than max_batch: runs alone
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


def test_model_spec_reads_names_dtypes_and_file_from_the_config(tmp_path):
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.pt").write_bytes(b"")
    (folder / "config.pbtxt").write_text(
        '# comment\nname: "m"\nplatform: "pytorch_libtorch"\nmax_batch_size: 16\n'
        'input { name: "input_ids" data_type: TYPE_INT64 dims: -1 }\n'
        'input { name: "attention_mask" data_type: TYPE_INT64 dims: -1 }\n'
        'output { name: "embedding" data_type: TYPE_FP32 dims: 384 }\n')
    spec = model_file("m", tmp_path)
    assert spec.input_names == ["input_ids", "attention_mask"] and spec.output_names == ["embedding"]
    assert spec.input_dtypes == {"input_ids": np.int64, "attention_mask": np.int64}
    assert spec.max_batch_size == 16 and spec.model_path == folder / "1" / "model.pt"


# -- in-process limit and first-request repository ------------------------------------------------
def _tiny_spec(path: Path) -> ModelFile:
    return ModelFile(path, ["x", "offset"], ["y"], {"x": np.float32, "offset": np.int64}, 8)


def test_inprocess_limit_on_a_tiny_module(tiny_module):
    def make_batch(n):
        return {"offset": np.ones((n, 2), dtype=np.int64), "x": np.ones((n, 3), dtype=np.float32)}  # any order

    result = limit(_tiny_spec(tiny_module), make_batch, batch_sizes=(1, 2, 4, 8, 64), seconds_per_size=0.02,
                   threads=1, max_batch=8)
    assert [r.batch for r in result.table] == [1, 2, 4, 8]
    assert all(r.calls >= 3 and r.items_per_s > 0 and r.median_ms > 0 for r in result.table)
    assert result.best_batch in (1, 2, 4, 8) and result.best_items_per_s == max(r.items_per_s for r in result.table)
    assert result.batch1_median_ms == result.table[0].median_ms and result.threads == 1
    with pytest.raises(ValueError, match="shape"):
        limit(_tiny_spec(tiny_module), lambda n: {"x": np.ones((1, 3), np.float32), "offset": np.ones((1, 2), np.int64)},
              batch_sizes=(2,), seconds_per_size=0.01, threads=1)


def test_the_first_request_repository_drops_only_the_warmup(tmp_path):
    source = tmp_path / "src" / "m"
    (source / "1").mkdir(parents=True)
    (source / "1" / "model.pt").write_bytes(b"weights")
    (source / "labels.txt").write_text("a\nb\n")
    (source / "config.pbtxt").write_text(
        'name: "m"\nplatform: "pytorch_libtorch"\nmax_batch_size: 4\n'
        'input { name: "x" data_type: TYPE_FP32 dims: 2 }\noutput { name: "y" data_type: TYPE_FP32 dims: 2 }\n'
        'dynamic_batching { max_queue_delay_microseconds: 100 }\n'
        'model_warmup { name: "w1" batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 dims: 2 '
        'zero_data: true } } }\n')
    assert _serving_repository(tmp_path / "src", "m", tmp_path / "on", keep_warmup=True) == {"m": 1}
    assert _serving_repository(tmp_path / "src", "m", tmp_path / "off", keep_warmup=False) == {"m": 0}
    off = tmp_path / "off" / "m"
    text = (off / "config.pbtxt").read_text()
    assert "model_warmup" not in text and "max_queue_delay_microseconds: 100" in text
    assert "model_warmup" in (tmp_path / "on" / "m" / "config.pbtxt").read_text()
    assert (off / "1").is_symlink() and (off / "1" / "model.pt").read_bytes() == b"weights"
    assert (off / "labels.txt").read_text() == "a\nb\n"


def test_an_ensemble_is_served_with_its_members_each_without_its_warmup(tmp_path):
    from deploy.server import DEFAULT_REPOSITORY

    assert members(DEFAULT_REPOSITORY, "image_classifier") == ["image_classifier", "preprocess", "efficientnet_lite0",
                                                                "postprocess"]
    assert members(DEFAULT_REPOSITORY, "text_embedder") == ["text_embedder", "tokenize", "minilm"]
    on = _serving_repository(DEFAULT_REPOSITORY, "image_classifier", tmp_path / "on", keep_warmup=True)
    off = _serving_repository(DEFAULT_REPOSITORY, "image_classifier", tmp_path / "off", keep_warmup=False)
    assert list(on) == list(off) == members(DEFAULT_REPOSITORY, "image_classifier")
    assert on["image_classifier"] == 0 and all(on[m] > 0 for m in ("preprocess", "efficientnet_lite0", "postprocess"))
    assert set(off.values()) == {0}
    for name in off:
        assert "model_warmup" not in (tmp_path / "off" / name / "config.pbtxt").read_text()
    assert (tmp_path / "off" / "preprocess" / "1").is_symlink()


def _model(tmp_path, config: str):
    (tmp_path / "m").mkdir(parents=True, exist_ok=True)
    (tmp_path / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n' + config)
    return tmp_path


def test_a_payload_for_a_model_of_ones_own(tmp_path):
    repo = _model(tmp_path, 'max_batch_size: 4\ninput { name: "x" data_type: TYPE_FP32 dims: [3, -1] }\n'
                            'input { name: "n" data_type: TYPE_INT64 dims: 1 }\n'
                            'input { name: "o" data_type: TYPE_FP32 dims: 1 optional: true }\n'
                            'output { name: "y" data_type: TYPE_FP32 dims: 2 }\n')
    with pytest.raises(PayloadError, match=r"'x' of model 'm' has a dynamic dim .* --shape x:3,N"):
        payload_for(repo, "m")
    made = payload_for(repo, "m", PayloadOptions(shapes={"x": (3, 8)}))
    assert set(made) == {"x", "n"} and made["x"].shape == (1, 3, 8) and made["x"].dtype == np.float32
    assert made["n"].shape == (1, 1) and made["n"].dtype == np.int64
    data = tmp_path / "input.json"
    data.write_text('{"data": [{"x": {"content": [1, 2, 3, 4, 5, 6], "shape": [3, 2]}, "n": [7]}]}')
    given = payload_for(repo, "m", PayloadOptions(input_data=data))
    assert given["x"].tolist() == [[[1, 2], [3, 4], [5, 6]]] and given["n"].tolist() == [[7]]


def test_a_model_without_a_payload_is_one_clear_error(tmp_path):
    repo = _model(tmp_path, 'max_batch_size: 0\ninput { name: "TEXT" data_type: TYPE_STRING dims: 1 }\n'
                            'output { name: "y" data_type: TYPE_FP32 dims: 2 }\n')
    with pytest.raises(PayloadError, match="'TEXT' of model 'm' is BYTES.* --input-data FILE.json or --samples"):
        payload_for(repo, "m")
    data = tmp_path / "input.json"
    data.write_text('{"data": [{"TEXT": ["hello"]}]}')
    assert payload_for(repo, "m", PayloadOptions(input_data=data))["TEXT"].tolist() == [b"hello"]
    data.write_text('{"data": [{}]}')
    with pytest.raises(PayloadError, match="entry 0.*'TEXT'"):
        payload_for(repo, "m", PayloadOptions(input_data=data))
    with pytest.raises(PayloadError, match="decoupled"):
        payload_for(DEFAULT_REPOSITORY, "text_generator")
    with pytest.raises(FileNotFoundError, match="no .*nope/config.pbtxt"):
        payload_for(tmp_path, "nope")


def test_the_pipelines_payloads_are_their_own_real_samples():
    image = payload_for(DEFAULT_REPOSITORY, "image_classifier")
    assert image["IMAGE"].shape == (1, 1) and image["IMAGE"][0, 0][:2] == b"\xff\xd8"  # a JPEG
    assert payload_for(DEFAULT_REPOSITORY, "text_embedder")["TEXT"].dtype == object
