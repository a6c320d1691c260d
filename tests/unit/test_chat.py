"""CHAT prompts: the GGUF's own chat template, rendered and tokenised exactly as transformers does it."""

import os
import re
from pathlib import Path

import numpy as np
import pytest

from backends import chat
from backends.chat import ChatTemplate, ChatTemplateError
from backends.generation import EOS_IDS, GenerationInputError, parse_request
from export.zoo import smollm

os.environ.setdefault("HF_HUB_OFFLINE", "1")
COMMITTED = Path(__file__).resolve().parents[2] / "model_repository" / "text_generator" / "1" / chat.FILE_NAME
QUESTIONS = (
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Übersetze bitte: «good morning» — 日本語でも。",
    "Render {{ messages }} and {% raw %} literally, please.",
    "  leading and trailing spaces  \n",
)


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate.load(COMMITTED)


@pytest.fixture(scope="module")
def hf_tokenizer():
    from tests.smollm_reference import transformers_tokenizer

    return transformers_tokenizer()


def one(value, dtype=np.object_):
    return np.array([value], dtype=dtype)


def test_the_committed_template_is_the_ggufs_own(template):
    from_gguf = ChatTemplate.from_gguf(smollm.gguf_path())
    assert template == from_gguf, f"run `python -m backends.chat {smollm.gguf_path()} {COMMITTED}`"
    assert template.end_of_turn_token == "<|im_end|>" and template.stop_ids == {2}
    template.check_tokenizer(smollm.tokenizer())


@pytest.mark.parametrize("question", QUESTIONS)
def test_rendering_and_tokens_equal_transformers_apply_chat_template(template, hf_tokenizer, question):
    messages = [{"role": "user", "content": question}]
    assert template.render(question) == hf_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )
    parsed = parse_request(
        smollm.tokenizer(), one(question.encode()), one(8, np.int32), chat=one(True, np.bool_), template=template
    )
    expected = hf_tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)["input_ids"]
    assert parsed.prompt_ids == list(expected)
    assert parsed.stop_ids == template.stop_ids


def test_chat_false_or_absent_keeps_the_raw_prompt(template):
    raw = smollm.tokenizer().encode("The capital of France is").ids
    for flag in (None, one(False, np.bool_)):
        parsed = parse_request(
            smollm.tokenizer(), one(b"The capital of France is"), one(8, np.int32), chat=flag, template=template
        )
        assert parsed.prompt_ids == raw and parsed.stop_ids == EOS_IDS


@pytest.mark.parametrize(
    "flag, template_present, message",
    [
        (one(1, np.int32), True, "CHAT must be BOOL (true or false), got int32"),
        (one(b"true"), True, "CHAT must be BOOL"),
        (np.array([True, False]), True, "CHAT must hold exactly one element, got 2"),
        (np.array([], dtype=np.bool_), True, "CHAT must hold exactly one element, got 0"),
        (one(True, np.bool_), False, "CHAT is true but this model has no chat template"),
    ],
)
def test_a_bad_chat_value_is_refused_naming_chat(template, flag, template_present, message):
    with pytest.raises(GenerationInputError) as caught:
        parse_request(
            smollm.tokenizer(),
            one(b"Hello"),
            one(4, np.int32),
            chat=flag,
            template=template if template_present else None,
        )
    assert message in str(caught.value)


def test_a_template_that_refuses_the_conversation_is_a_clear_error(template):
    strict = ChatTemplate(
        template="{{ raise_exception('only system prompts, please') }}",
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        end_of_turn_token="<|im_end|>",
        ids={"<|im_start|>": 1, "<|im_end|>": 2},
    )
    with pytest.raises(GenerationInputError, match="CHAT: the chat template refused the prompt: only system"):
        parse_request(smollm.tokenizer(), one(b"Hello"), one(4, np.int32), chat=one(True, np.bool_), template=strict)


def test_the_template_runs_sandboxed():
    sneaky = ChatTemplate(
        template="{{ messages.__class__.__mro__ }}",
        bos_token="a",
        eos_token="b",
        end_of_turn_token="b",
        ids={"a": 1, "b": 2},
    )
    with pytest.raises(ChatTemplateError, match="refused"):
        sneaky.render("hi")


def test_a_broken_file_or_a_mismatched_tokenizer_is_refused(tmp_path, template):
    bad = tmp_path / chat.FILE_NAME
    bad.write_text('{"template": "x"}')
    with pytest.raises(ChatTemplateError, match="not a chat template file"):
        ChatTemplate.load(bad)
    shifted = ChatTemplate(
        template.template,
        template.bos_token,
        template.eos_token,
        template.end_of_turn_token,
        ids={template.bos_token: 1, template.eos_token: 3},
    )
    with pytest.raises(ChatTemplateError, match=re.escape("'<|im_end|>' is id 3, the tokenizer's is 2")):
        shifted.check_tokenizer(smollm.tokenizer())


def test_the_writer_cli(tmp_path, capsys):
    out = tmp_path / chat.FILE_NAME
    assert chat.main([str(smollm.gguf_path()), str(out)]) == 0
    assert ChatTemplate.load(out) == ChatTemplate.load(COMMITTED)
    written, committed = (folder / chat.HF_CONFIG_NAME for folder in (tmp_path, COMMITTED.parent))
    assert written.read_text() == committed.read_text(), "the committed tokenizer_config.json is the writer's"
    assert chat.main([str(tmp_path / "missing.gguf"), str(out)]) == 2
    assert "error" in capsys.readouterr().err


def test_the_version_folder_is_a_tokenizer_folder_whose_template_renders_as_the_models(template):
    """What GenAI-Perf and the OpenAI-compatible frontend load with ``--tokenizer`` (AutoTokenizer, offline):
    the frontend formats chat messages with it and sends the text, so it must render what CHAT renders."""
    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(COMMITTED.parent)
    for question in QUESTIONS:
        messages = [{"role": "user", "content": question}]
        assert loaded.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == template.render(
            question
        )
    assert loaded.eos_token == template.eos_token and loaded.encode("Paris", add_special_tokens=False) == (
        smollm.tokenizer().encode("Paris").ids
    )
