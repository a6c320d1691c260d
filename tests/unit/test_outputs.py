"""export.outputs: what a forward returns (tensor, tuple, dict, ModelOutput, nested) becomes named tensors that
--output picks; what is left out is named, and each wrong request is one clear error."""

from collections import OrderedDict

import pytest
import torch

from export import outputs
from export.errors import SpecError, UserModelError

A, B, C = torch.ones(2, 3), torch.zeros(2, 4), torch.full((2, 1), 5.0)


class ModelOutputLike(OrderedDict):
    """Like transformers' ModelOutput: an OrderedDict subclass."""


def chosen(result, wanted=()):
    """(name, tensor) of each output, in order, and what was left out."""
    selection = outputs.select(result, list(wanted), "m.py:build")
    return [(name, outputs.pick(result, path)) for name, path in selection.outputs], list(selection.left_out)


def names(result, wanted=()):
    return [name for name, _ in chosen(result, wanted)[0]]


def test_a_tensor_is_output_0_or_the_name_given():
    (only,), left = chosen(A)
    assert only[0] == "output_0" and only[1] is A and left == []
    assert names(A, ["scores"]) == ["scores"]


def test_a_tuples_tensors_are_named_by_output_in_order():
    got, left = chosen((A, B), ["first", "second"])
    assert got == [("first", A), ("second", B)] and left == []
    assert names([A, B]) == ["output_0", "output_1"]


def test_a_nested_tuple_is_taken_depth_first_and_its_none_is_left_out():
    got, left = chosen(((A, (B, None)), C))
    assert [n for n, _ in got] == ["output_0", "output_1", "output_2"]
    assert [t for _, t in got] == [A, B, C]
    assert left == ["result[0][1][1] (NoneType)"]


def test_tensors_beyond_the_names_given_are_left_out():
    got, left = chosen((A, B, C), ["a"])
    assert got == [("a", A)]
    assert left == ["result[1] (not named by --output)", "result[2] (not named by --output)"]


def test_a_dicts_tensors_are_named_by_their_keys_in_the_models_order():
    got, left = chosen({"logits": A, "hidden": B})
    assert got == [("logits", A), ("hidden", B)] and left == []


def test_output_picks_and_orders_a_dicts_tensors_and_the_rest_are_left_out():
    got, left = chosen({"logits": A, "hidden": B, "pooled": C}, ["pooled", "logits"])
    assert got == [("pooled", C), ("logits", A)]
    assert left == ["hidden (not asked for)"]


def test_nested_entries_of_a_dict_join_their_keys_and_positions_with_underscores():
    result = {"enc": {"last": A}, "hidden": (B, C), "cache": None}
    got, left = chosen(result)
    assert got == [("enc_last", A), ("hidden_0", B), ("hidden_1", C)]
    assert left == ["cache (NoneType)"]


def test_a_model_output_like_ordered_dict_is_named_by_its_keys():
    result = ModelOutputLike(last_hidden_state=A, pooler_output=C)
    result["past_key_values"] = ((B, B),)
    got, left = chosen(result, ["last_hidden_state", "pooler_output"])
    assert got == [("last_hidden_state", A), ("pooler_output", C)]
    assert left == ["past_key_values_0_0 (not asked for)", "past_key_values_0_1 (not asked for)"]


def test_the_left_out_line_lists_a_few_and_counts_the_rest():
    selection = outputs.select({f"t{i}": A for i in range(12)}, ["t0"], "m.py:build")
    line = selection.left_out_line()
    assert line.startswith("t1 (not asked for), t2 (not asked for)") and line.endswith("and 3 more")
    assert line.count("(not asked for)") == outputs.LISTED


@pytest.mark.parametrize(
    "result, shown",
    [
        (None, "NoneType"),
        ("text", "str"),
        ({"a": None, "b": "x"}, "dict {a: NoneType, b: str}"),
        ((), "an empty tuple"),
    ],
)
def test_a_result_without_a_tensor_is_one_error_saying_what_it_held(result, shown):
    with pytest.raises(UserModelError) as caught:
        outputs.select(result, [], "m.py:build")
    assert str(caught.value) == f"m.py:build: forward returned no tensor: {shown}"


def test_an_output_that_names_no_output_is_an_error_listing_the_outputs():
    with pytest.raises(SpecError) as caught:
        outputs.select({"logits": A, "hidden": B, "cache": None}, ["logits", "pooled"], "m.py:build")
    assert str(caught.value) == "m.py:build: --output 'pooled' names no output; forward returns logits, hidden"


def test_more_output_names_than_unnamed_tensors_is_an_error_listing_them():
    with pytest.raises(SpecError) as caught:
        outputs.select((A, None, B), ["a", "b", "c"], "m.py:build")
    assert str(caught.value) == (
        "m.py:build: --output names 3 outputs, forward returns 2 unnamed tensor(s) (result[0], result[2]), "
        "named by --output in order"
    )


def test_an_output_given_twice_is_an_error():
    with pytest.raises(SpecError, match="--output 'a' given more than once"):
        outputs.select({"a": A}, ["a", "a"], "m.py:build")


def test_two_entries_joining_to_the_same_name_are_an_error():
    with pytest.raises(SpecError, match="both be named 'a_b'"):
        outputs.select({"a_b": A, "a": {"b": B}}, [], "m.py:build")
