"""tritonkit genai-perf (loadtest/studies/genai_perf/command.py) without a server: the tokenizer folder it writes from
the generator's own files tokenizes as the generator does, and bad arguments are one line and exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer

import tritonkit_cli
from loadtest.studies.genai_perf import command as genai_perf

GENERATOR_VERSION = Path(__file__).resolve().parents[5] / "model_repository" / "text_generator" / "1"


def test_the_tokenizer_folder_loads_offline_and_tokenizes_as_the_generator(tmp_path):
    from transformers import AutoTokenizer

    folder = genai_perf.tokenizer_folder(GENERATOR_VERSION, tmp_path / "tokenizer")
    loaded = AutoTokenizer.from_pretrained(folder)
    own = Tokenizer.from_file(str(GENERATOR_VERSION / "tokenizer.json"))
    text = "The capital of France is Paris. Ünïcödé too."
    assert loaded(text, add_special_tokens=False).input_ids == own.encode(text).ids
    assert loaded.eos_token == "<|im_end|>" and "<|im_start|>" in loaded.chat_template


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--requests", "0"], "--requests must be at least 1"),
        (["--model", "digits"], "has no tokenizer.json: GenAI-Perf counts tokens with the model's tokenizer"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, argv, words):
    args = tritonkit_cli.build_parser().parse_args(["genai-perf", *argv, "--out", str(tmp_path)])
    assert genai_perf._handler(args) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_a_local_server_loads_the_generator_with_the_steps_its_config_names(tmp_path):
    repository = GENERATOR_VERSION.parents[1]
    assert genai_perf.served_models(repository, "text_generator") == (
        "text_generator",
        "smollm2_prefill",
        "smollm2_decode",
    )
    (tmp_path / "mine").mkdir()
    text = (repository / "text_generator" / "config.pbtxt").read_text()
    renamed = text.replace('"smollm2_prefill"', '"my_prefill"').replace('"smollm2_decode"', '"my_decode"')
    assert renamed != text
    (tmp_path / "mine" / "config.pbtxt").write_text(renamed.replace('name: "text_generator"', 'name: "mine"'))
    assert genai_perf.served_models(tmp_path, "mine") == ("mine", "my_prefill", "my_decode")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.pbtxt").write_text('name: "plain"\nbackend: "python"\n')
    assert genai_perf.served_models(tmp_path, "plain") == ("*",), "a Python model naming no steps may call any model"
    # An ensemble (Triton loads its steps with it) and a tensor model are loaded alone.
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "config.pbtxt").write_text('name: "pipeline"\nplatform: "ensemble"\n')
    assert genai_perf.served_models(tmp_path, "pipeline") == ("pipeline",)
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "config.pbtxt").write_text('name: "net"\nbackend: "onnxruntime"\n')
    assert genai_perf.served_models(tmp_path, "net") == ("net",)


def test_genai_perf_missing_and_not_installable_is_one_line_naming_the_log_and_exit_2(
    tmp_path, monkeypatch, capsys, failing_setup
):
    version = tmp_path / "repository" / "text_generator" / "1"
    version.mkdir(parents=True)
    (version / "tokenizer.json").write_text("{}")
    monkeypatch.setattr(genai_perf, "GENAI_PERF", tmp_path / "nowhere" / "genai-perf")
    argv = ["genai-perf", "--repository", str(tmp_path / "repository"), "--out", str(tmp_path / "out")]
    assert genai_perf._handler(tritonkit_cli.build_parser().parse_args(argv)) == 2
    installing, error = capsys.readouterr().err.splitlines()
    assert installing.startswith("setup: installing GenAI-Perf (first use of tritonkit genai-perf)")
    assert error.startswith("genai-perf: error: GenAI-Perf is missing")
    assert str(failing_setup / "genai-perf.log") in error


def test_flags_after_the_double_dash_go_to_genai_perf_profile_as_given():
    args = tritonkit_cli.build_parser().parse_args(["genai-perf", "--", "--warmup-request-count", "2", "--verbose"])
    cmd = genai_perf.command(args, "127.0.0.1:8001", Path("/tok"))
    assert cmd[-3:] == ["--warmup-request-count", "2", "--verbose"] and "--" not in cmd
