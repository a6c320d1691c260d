"""loadtest/probes/inprocess.py: the model spec read from a config, and the in-process limit on a tiny module."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loadtest.probes.inprocess import ModelFile, limit, model_file


def test_model_spec_reads_names_dtypes_and_file_from_the_config(tmp_path):
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.pt").write_bytes(b"")
    (folder / "config.pbtxt").write_text(
        '# comment\nname: "m"\nplatform: "pytorch_libtorch"\nmax_batch_size: 16\n'
        'input { name: "input_ids" data_type: TYPE_INT64 dims: -1 }\n'
        'input { name: "attention_mask" data_type: TYPE_INT64 dims: -1 }\n'
        'output { name: "embedding" data_type: TYPE_FP32 dims: 384 }\n'
    )
    spec = model_file("m", tmp_path)
    assert spec.input_names == ["input_ids", "attention_mask"] and spec.output_names == ["embedding"]
    assert spec.input_dtypes == {"input_ids": np.int64, "attention_mask": np.int64}
    assert spec.max_batch_size == 16 and spec.model_path == folder / "1" / "model.pt"


def _tiny_spec(path: Path) -> ModelFile:
    return ModelFile(path, ["x", "offset"], ["y"], {"x": np.float32, "offset": np.int64}, 8)


def test_inprocess_limit_on_a_tiny_module(tiny_module):
    def make_batch(n):
        return {"offset": np.ones((n, 2), dtype=np.int64), "x": np.ones((n, 3), dtype=np.float32)}  # any order

    result = limit(
        _tiny_spec(tiny_module), make_batch, batch_sizes=(1, 2, 4, 8, 64), seconds_per_size=0.02, threads=1, max_batch=8
    )
    assert [r.batch for r in result.table] == [1, 2, 4, 8]
    assert all(r.calls >= 3 and r.items_per_s > 0 and r.median_ms > 0 for r in result.table)
    assert result.best_batch in (1, 2, 4, 8) and result.best_items_per_s == max(r.items_per_s for r in result.table)
    assert result.batch1_median_ms == result.table[0].median_ms and result.threads == 1
    with pytest.raises(ValueError, match="shape"):
        limit(
            _tiny_spec(tiny_module),
            lambda n: {"x": np.ones((1, 3), np.float32), "offset": np.ones((1, 2), np.int64)},
            batch_sizes=(2,),
            seconds_per_size=0.01,
            threads=1,
        )
