"""tritonkit export --preprocess/--postprocess (export/user/pipeline*.py): around tests/data/user_model.py (a
scorer, features FP32 [16] -> 4 scores), the Python steps and the ensemble it writes, the in-process check on the
sample, and one line with exit status 2 for each wrong request."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from export import cli
from export import config as config_io
from export.spec import TensorSpec
from export.user.pipeline_spec import sample_array

USER_MODEL = Path(__file__).resolve().parents[1] / "data" / "user_model.py"
STEPS = textwrap.dedent('''
    import numpy as np

    LABELS = ["a", "b", "c", "d"]


    def widen(RAW):
        """RAW FP32 [8] -> the scorer's features [16]."""
        if not np.isfinite(RAW).all():
            raise ValueError("RAW holds NaN or infinity")
        return {"features": np.concatenate([RAW, RAW * 2], axis=1)}


    def label(scores, RAW):
        """The best score's label, and RAW's sum to show the postprocess sees the pipeline's inputs too."""
        return {"LABEL": [[LABELS[i]] for i in scores.argmax(axis=1)], "TOTAL": RAW.sum(axis=1, keepdims=True)}


    def fails(RAW):
        raise RuntimeError("this preprocess always fails")


    def misnamed(raw):
        return raw
''')


def export(tmp_path: Path, *extra: str, pre: str = "widen", post: str | None = "label") -> tuple[int, Path]:
    steps = tmp_path / "steps.py"
    steps.write_text(STEPS)
    repository = tmp_path / "repository"
    argv = [
        "--model-file", f"{USER_MODEL}:build", "--name", "scorer", "--input", "features:FP32:16",
        "--output", "scores", "--max-batch-size", "4", "--repository", str(repository),
        "--preprocess", f"{steps}:{pre}", "--pipeline-input", "RAW:FP32:8",
    ]  # fmt: skip
    if post:
        argv += ["--postprocess", f"{steps}:{post}", "--pipeline-output", "LABEL:BYTES:1"]
        argv += ["--pipeline-output", "TOTAL:FP32:1"]
    return cli.main(argv + list(extra)), repository


SAMPLE = ("--pipeline-sample", "RAW=0.5,1,1.5,2,2.5,3,3.5,4")


def test_the_steps_and_the_ensemble_are_written_around_the_exported_model(tmp_path, capsys):
    status, repository = export(tmp_path, *SAMPLE)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "scorer_pipeline              ensemble" in out and "LABEL [1, 1], TOTAL [1, 1]" in out
    ensemble = config_io.parse(repository / "scorer_pipeline" / "config.pbtxt")
    assert ensemble.platform == "ensemble" and ensemble.max_batch_size == 4
    steps = ensemble.ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["scorer_pipeline_preprocess", "scorer", "scorer_pipeline_postprocess"]
    assert dict(steps[2].input_map) == {"scores": "scores", "RAW": "RAW"}
    assert [t.name for t in ensemble.input] == ["RAW"] and [t.name for t in ensemble.output] == ["LABEL", "TOTAL"]
    pre = config_io.parse(repository / "scorer_pipeline_preprocess" / "config.pbtxt")
    assert pre.backend == "python" and pre.max_batch_size == 4 and pre.dynamic_batching.max_queue_delay_microseconds
    assert pre.parameters["FUNCTION"].string_value == "steps.py:widen"
    assert [(w.batch_size, w.inputs["RAW"].input_data_file) for w in pre.model_warmup] == [(1, "RAW"), (4, "RAW")]
    warm = np.frombuffer((repository / "scorer_pipeline_preprocess" / "warmup" / "RAW").read_bytes(), np.float32)
    assert warm.tolist() == [0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4]
    post_folder = repository / "scorer_pipeline_postprocess"
    assert (post_folder / "1" / "steps.py").read_text() == STEPS
    assert "UserStepModel as TritonPythonModel" in (post_folder / "1" / "model.py").read_text()
    # The postprocess warms on the scores the eager model gave the sample: real data, not random.
    assert len((post_folder / "warmup" / "scores").read_bytes()) == 4 * 4


@pytest.mark.parametrize(
    ("extra", "pre", "post", "words"),
    [
        ((), "widen", "label", "give one --pipeline-sample NAME=... for each pipeline input (RAW); missing RAW"),
        (SAMPLE, "fails", None, "pipeline scorer_pipeline, on --pipeline-sample: scorer_pipeline_preprocess: "
         "preprocess fails failed on input RAW: RuntimeError: this preprocess always fails"),
        (SAMPLE, "misnamed", None, "parameter(s) 'raw' name no tensor; each parameter is a tensor's name, one of RAW"),
        (("--pipeline-sample", "RAW=1,2"), "widen", "label",
         "--pipeline-sample RAW: shape [1, 2] does not fit dims [8]"),
        (SAMPLE + ("--pipeline-output", "scores:FP32:4"), "widen", "label",
         "tensor name 'scores' is in both the model's outputs and --pipeline-output"),
    ],
)  # fmt: skip
def test_each_wrong_pipeline_is_one_line_and_exit_2(tmp_path, capsys, extra, pre, post, words):
    status, repository = export(tmp_path, *extra, pre=pre, post=post)
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and words in err, err
    assert not (repository / "scorer_pipeline").exists() and not (repository / "scorer").exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--preprocess", "x.py:f", "--pipeline-input", "T:BYTES:1"], "give --model-file"),
        (["--model-file", f"{USER_MODEL}:build", "--name", "s", "--input", "features:FP32:16",
          "--pipeline-input", "T:BYTES:1"], "--pipeline-input needs --preprocess or --postprocess"),
        (["--model-file", f"{USER_MODEL}:build", "--name", "s", "--input", "features:FP32:16",
          "--preprocess", "steps:widen", "--pipeline-input", "T:BYTES:1"],
         "--preprocess 'steps:widen' is not FILE.py:FUNC"),
        (["--model-file", f"{USER_MODEL}:build", "--name", "s", "--input", "features:FP32:16",
          "--postprocess", f"{USER_MODEL}:build"], "--postprocess and --pipeline-output go together"),
    ],
)  # fmt: skip
def test_pipeline_flags_that_do_not_fit_together_are_refused_before_any_export(tmp_path, capsys, argv, words):
    assert cli.main([*argv, "--repository", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


def test_a_bytes_sample_is_a_text_or_a_files_bytes_batched_as_one_request(tmp_path):
    spec = TensorSpec("TEXT", "BYTES", (1,))
    assert sample_array(spec, "héllo", batched=True).tolist() == [["héllo".encode()]]
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(b"\xff\xd8jpeg")
    assert sample_array(spec, f"@{photo}", batched=False).tolist() == [b"\xff\xd8jpeg"]
    numbers = tmp_path / "x.npy"
    np.save(numbers, np.arange(6, dtype=np.float64).reshape(2, 3))
    got = sample_array(TensorSpec("X", "FP32", (-1, 3)), f"@{numbers}", batched=True)
    assert got.dtype == np.float32 and got.shape == (1, 2, 3)
