"""backends/messages.py: the error a Python-backend model sends its client is one short line."""

from backends.messages import MAX_CHARS, client_message

TORCHSCRIPT = (
    "The following operation failed in the TorchScript interpreter.\n"
    "Traceback of TorchScript, serialized code (most recent call last):\n"
    '  File "code/__torch__/export/zoo/minilm.py", line 44, in forward\n'
    + "/a/long/site-packages/path.py(177): forward\n" * 200
    + "RuntimeError: cannot reshape tensor of 0 elements into shape [1, 0, -1, 32]\n"
)


def test_a_torchscript_traceback_becomes_its_own_error_line_named_for_the_model():
    assert len(TORCHSCRIPT) > 8192  # past gRPC's metadata limit as it came
    assert client_message(RuntimeError(TORCHSCRIPT), "minilm") == (
        "minilm: RuntimeError: cannot reshape tensor of 0 elements into shape [1, 0, -1, 32]"
    )


def test_a_message_that_names_its_model_already_is_kept_and_a_long_one_is_cut():
    assert client_message(ValueError("digits: input 'x' is missing"), "digits") == "digits: input 'x' is missing"
    cut = client_message(ValueError("x" * 5000))
    assert len(cut) == MAX_CHARS and cut.endswith("...")
    assert client_message(KeyError(), "m") == "m: KeyError"
