"""A user's pre/post-processing function as a pipeline step (backends/user_steps.py): what it may return, how
its parameters bind, and the one-line error for each way it can go wrong."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends import user_steps
from backends.user_steps import Declared, StepError

IDS = Declared("input_ids", "INT64", (-1,))
MASK = Declared("attention_mask", "INT64", (-1,))
TEXT = np.array([[b"hello world"], [b"hi"]], dtype=object)


class Encoding:
    """Like transformers' BatchEncoding: keys and item access, but not a Mapping."""

    def __init__(self, data):
        self.data = data

    def keys(self):
        return self.data.keys()

    def __getitem__(self, key):
        return self.data[key]


def tokenize(TEXT):  # noqa: N803 - a tensor's name
    ids = [[1, 2, 3], [1, 4, 0]][: len(TEXT)]
    return Encoding({"input_ids": ids, "attention_mask": [[1, 1, 1], [1, 1, 0]][: len(TEXT)], "token_type_ids": ids})


def test_a_dict_like_result_gives_each_declared_output_in_its_datatype_and_extra_keys_are_ignored():
    got = user_steps.run(tokenize, {"TEXT": TEXT}, [IDS, MASK], "pre")
    assert list(got) == ["input_ids", "attention_mask"]
    assert got["input_ids"].dtype == np.int64 and got["input_ids"].shape == (2, 3)


def test_a_single_output_may_be_returned_bare_and_torch_tensors_are_taken():
    got = user_steps.run(lambda x: torch.ones(2, 4), {"x": np.zeros((2, 1))}, [Declared("y", "FP32", (4,))], "post")
    assert got["y"].dtype == np.float32 and got["y"].shape == (2, 4)


def test_bytes_outputs_take_strings_and_bytes():
    got = user_steps.run(
        lambda x: {"LABEL": [["cat"], [b"dog"]]}, {"x": np.zeros((2, 1))}, [Declared("LABEL", "BYTES", (1,))], "post"
    )
    assert got["LABEL"].tolist() == [[b"cat"], [b"dog"]]


def test_a_function_that_raises_is_one_error_naming_the_step_and_its_inputs():
    def fails(TEXT):  # noqa: N803
        raise ValueError("TEXT is empty\nsecond line")

    with pytest.raises(StepError) as error:
        user_steps.run(fails, {"TEXT": TEXT}, [IDS], "pipe_preprocess: preprocess fails")
    assert str(error.value) == "pipe_preprocess: preprocess fails failed on input TEXT: ValueError: TEXT is empty"


@pytest.mark.parametrize(
    ("function", "words"),
    [
        (lambda TEXT: {"input_ids": [[1]] * 2}, "returned no 'attention_mask' (it returned input_ids)"),  # noqa: N803
        (lambda TEXT: [[1]], "returned list; return a dict with input_ids, attention_mask"),  # noqa: N803
        (lambda TEXT: {"input_ids": [[1]], "attention_mask": [[1]]}, "output 'input_ids' has shape [1, 1]"),  # noqa: N803
        (lambda TEXT: {"input_ids": [["a"], ["b"]], "attention_mask": [[1]] * 2}, "output 'input_ids' is not INT64"),  # noqa: N803
    ],
)
def test_a_result_that_does_not_fit_the_declared_outputs_is_named(function, words):
    with pytest.raises(StepError, match="pre") as error:
        user_steps.run(function, {"TEXT": TEXT}, [IDS, MASK], "pre")
    assert words in str(error.value)


def test_parameters_are_tensor_names_and_a_parameter_naming_none_lists_the_tensors():
    assert user_steps.parameters(lambda a, b=1: 0, ["a", "c"], "f") == ["a"]
    assert user_steps.parameters(lambda **tensors: 0, ["a", "c"], "f") == ["a", "c"]
    with pytest.raises(StepError, match=r"parameter\(s\) 'text' name no tensor; .* one of TEXT"):
        user_steps.parameters(lambda text: 0, ["TEXT"], "f")
    with pytest.raises(StepError, match="takes none of the tensors"):
        user_steps.parameters(lambda other=1: 0, ["TEXT"], "f")


def test_a_file_that_fails_to_import_or_lacks_the_function_is_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import no_such_module_here\n")
    with pytest.raises(StepError, match="bad.py failed to import: ModuleNotFoundError"):
        user_steps.load_function(bad, "f", "user_test_bad")
    good = tmp_path / "good.py"
    good.write_text("def f(x):\n    return x\n")
    assert user_steps.load_function(good, "f", "user_test_good")(3) == 3
    with pytest.raises(StepError, match="good.py has no function 'g'"):
        user_steps.load_function(good, "g", "user_test_good2")
