"""Instruct prompts: the model's own chat template, read from its GGUF, rendered as transformers renders it.

A GGUF carries its chat template (``tokenizer.chat_template``, Jinja) and its special tokens
(``tokenizer.ggml.bos_token_id``, ``eos_token_id`` and, where the model has one apart from the end of
sequence, ``eot_token_id``). :meth:`ChatTemplate.from_gguf` reads them with the ``gguf`` package;
``python -m backends.chat GGUF OUT.json`` writes them to the JSON file that ``text_generator`` loads
(``<model>/<version>/chat_template.json``), so the serving image needs neither the GGUF nor ``gguf``.

:meth:`ChatTemplate.render` turns one user message into the prompt text exactly as transformers'
``apply_chat_template(..., add_generation_prompt=True)`` does: the same sandboxed Jinja environment
(``trim_blocks``, ``lstrip_blocks``, loop controls, ``raise_exception``, ``strftime_now``, a
``tojson`` that does not escape HTML) and the same variables (``messages``, ``add_generation_prompt``,
``bos_token``, ``eos_token``). The template is the model's data, so it runs sandboxed.
Generation stops at :attr:`ChatTemplate.stop_ids`: the end-of-turn token (the GGUF's ``eot`` token,
else its ``eos``) and the end-of-sequence token.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import datetime
from functools import cached_property
from pathlib import Path

FILE_NAME = "chat_template.json"
"""Beside ``tokenizer.json`` in the generator's version folder."""
HF_CONFIG_NAME = "tokenizer_config.json"
"""Also beside them: with it the version folder is a Hugging Face tokenizer folder, which
``transformers.AutoTokenizer`` loads offline (GenAI-Perf's ``--tokenizer``, the OpenAI-compatible frontend's)."""


class ChatTemplateError(ValueError):
    """A chat template that cannot be read, or that refuses a conversation; the message says which."""


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    template: str
    """The Jinja source, as the GGUF's ``tokenizer.chat_template`` holds it."""
    bos_token: str
    eos_token: str
    end_of_turn_token: str
    """What ends an assistant turn: the GGUF's ``eot`` token, else its ``eos`` token."""
    ids: dict[str, int]
    """Token string -> id for the three tokens above (checked against the tokenizer when served)."""
    source: str = ""
    """Where the template was read from, for people."""

    @property
    def stop_ids(self) -> frozenset[int]:
        """Token ids that end a chat answer: the end of turn and the end of sequence."""
        return frozenset({self.ids[self.end_of_turn_token], self.ids[self.eos_token]})

    @classmethod
    def from_gguf(cls, path: Path) -> ChatTemplate:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))

        def value(key: str, required: bool = True):
            field = reader.fields.get(key)
            if field is None:
                if required:
                    raise ChatTemplateError(f"{path}: the GGUF has no {key}")
                return None
            return field.contents()

        tokens = reader.fields.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise ChatTemplateError(f"{path}: the GGUF has no tokenizer.ggml.tokens")
        bos, eos = int(value("tokenizer.ggml.bos_token_id")), int(value("tokenizer.ggml.eos_token_id"))
        eot = value("tokenizer.ggml.eot_token_id", required=False)
        eot = eos if eot is None else int(eot)
        names = {i: str(tokens.contents(i)) for i in {bos, eos, eot}}
        return cls(
            template=str(value("tokenizer.chat_template")),
            bos_token=names[bos],
            eos_token=names[eos],
            end_of_turn_token=names[eot],
            ids={name: i for i, name in names.items()},
            source=f"{Path(path).name}: tokenizer.chat_template, tokenizer.ggml.{{bos,eos,eot}}_token_id",
        )

    @classmethod
    def load(cls, path: Path) -> ChatTemplate:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
            made = cls(**raw)
            _ = made.stop_ids  # every named token has an id (the property raises KeyError for one without)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ChatTemplateError(f"{path}: not a chat template file ({type(exc).__name__}: {exc})") from None
        return made

    def save(self, path: Path) -> Path:
        """Write this file and, beside it, :data:`HF_CONFIG_NAME`."""
        Path(path).write_text(
            json.dumps(dataclasses.asdict(self), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        (Path(path).parent / HF_CONFIG_NAME).write_text(json.dumps(self.hf_tokenizer_config(), indent=1) + "\n")
        return Path(path)

    def hf_tokenizer_config(self) -> dict:
        """``tokenizer_config.json`` for the ``tokenizer.json`` beside it: transformers' fast tokenizer with this
        template and its special tokens, so ``apply_chat_template`` there renders what :meth:`render` renders."""
        return {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "clean_up_tokenization_spaces": False,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "chat_template": self.template,
        }

    def check_tokenizer(self, tokenizer) -> None:
        """Refuse a tokenizer (``tokenizers.Tokenizer``) that gives the template's tokens other ids."""
        for token, expected in self.ids.items():
            found = tokenizer.token_to_id(token)
            if found != expected:
                raise ChatTemplateError(f"the chat template's {token!r} is id {expected}, the tokenizer's is {found}")

    @cached_property
    def _compiled(self):
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            return env.from_string(self.template)
        except jinja2.exceptions.TemplateError as exc:
            raise ChatTemplateError(f"the chat template does not compile: {exc}") from None

    def render(self, user_message: str) -> str:
        """One user turn and the start of the assistant's: the prompt text to tokenise."""
        import jinja2

        try:
            return self._compiled.render(
                messages=[{"role": "user", "content": user_message}],
                add_generation_prompt=True,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
            )
        except jinja2.exceptions.TemplateError as exc:
            raise ChatTemplateError(f"the chat template refused the prompt: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m backends.chat",
        description="Write a GGUF's chat template and special tokens to the JSON "
        f"file text_generator loads ({FILE_NAME}).",
    )
    parser.add_argument("gguf", type=Path, help="the model's .gguf file")
    parser.add_argument("out", type=Path, help=f"where to write it, e.g. model_repository/text_generator/1/{FILE_NAME}")
    args = parser.parse_args(argv)
    try:
        template = ChatTemplate.from_gguf(args.gguf)
    except (OSError, ChatTemplateError, ValueError) as exc:
        print(f"backends.chat: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {template.save(args.out)} (end of turn {template.end_of_turn_token!r}, "
        f"stop ids {sorted(template.stop_ids)})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
