"""Text-generation helpers shared by model_repository/text_generator and its tests (no Triton import).

* :func:`parse_request` checks one request's raw inputs and tokenises the prompt (with ``CHAT`` true,
  the prompt formatted by the model's chat template, :mod:`backends.chat`), raising
  :class:`GenerationInputError` with a message that names the problem;
* :class:`TokenStreamer` turns generated token ids into text pieces that are always complete UTF-8
  characters (a byte-level BPE token can end in the middle of one);
* :class:`StopMatcher` holds back text that may be the start of the ``STOP`` string, and cuts the
  stream where it appears (the stop string itself is not sent);
* :func:`choose_tokens` picks the next token per row: greedy at temperature 0, else sampled.
"""

from __future__ import annotations

import codecs
import dataclasses
import math

import numpy as np

EOS_IDS = frozenset({0, 2})  # <|endoftext|>, <|im_end|> (the GGUF's eos)
SPECIAL_IDS = frozenset({0, 1, 2})  # <|endoftext|>, <|im_start|>, <|im_end|>: never sent as text


class GenerationInputError(ValueError):
    """A request the generator refuses; the message names the input and the problem."""


MAX_PROMPT_TOKENS = 1024
"""Longest prompt accepted, in tokens (config parameter ``MAX_PROMPT_TOKENS``)."""
MAX_NEW_TOKENS = 512
"""Largest ``MAX_TOKENS`` accepted (config parameter ``MAX_NEW_TOKENS``)."""
MAX_PROMPT_BYTES = 32 * 1024
"""Largest prompt accepted, in UTF-8 bytes, checked before decoding or tokenising (``MAX_PROMPT_BYTES``)."""
MAX_STOP_BYTES = 1024
"""Largest ``STOP`` string accepted, in UTF-8 bytes, checked before decoding (``MAX_STOP_BYTES``)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    max_new_tokens: int = MAX_NEW_TOKENS
    max_prompt_bytes: int = MAX_PROMPT_BYTES
    max_stop_bytes: int = MAX_STOP_BYTES

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if getattr(self, field.name) < 1:
                raise ValueError(f"{field.name.upper()} must be at least 1, got {getattr(self, field.name)}")

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> Limits:
        """The limits from a model config's parameters (``MAX_PROMPT_TOKENS``, ...); defaults where absent."""
        values = {}
        for field in dataclasses.fields(cls):
            raw = params.get(field.name.upper(), "").strip()
            if raw:
                try:
                    values[field.name] = int(raw)
                except ValueError:
                    raise ValueError(f"parameter {field.name.upper()} is not an integer: {raw!r}") from None
        return cls(**values)


@dataclasses.dataclass
class ParsedRequest:
    prompt_ids: list[int]
    max_tokens: int
    temperature: float
    stop: str
    stop_ids: frozenset[int] = EOS_IDS
    """Token ids that end this stream (not sent): end of sequence, or with ``CHAT`` the template's end of turn."""
    min_tokens: int = 0
    """Tokens generated before ``stop_ids`` may end the stream (vLLM's ``min_tokens``); earlier ones are skipped."""


def _single(array, name: str):
    if array is None:
        return None
    flat = np.asarray(array).reshape(-1)
    if flat.size != 1:
        raise GenerationInputError(f"{name} must hold exactly one element, got {flat.size}")
    return flat[0]


def _text(value, name: str, max_bytes: int | None = None, limit: str = "") -> str:
    """One BYTES element -> str; its size is checked against ``max_bytes`` (config parameter ``limit``) before it
    is decoded."""
    if isinstance(value, np.ndarray):
        value = value.item()
    raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
    if max_bytes is not None and len(raw) > max_bytes:
        raise GenerationInputError(
            f"{name} is too long: {len(raw)} bytes, over the limit of {max_bytes} bytes ({limit})"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GenerationInputError(f"{name} is not valid UTF-8 (byte {exc.start}: {exc.reason})") from None


def _chat_flag(chat, name: str = "CHAT") -> bool:
    """The optional ``CHAT`` BOOL [1] input -> bool; anything but one boolean is refused."""
    if chat is None:
        return False
    array = np.asarray(chat)
    if array.dtype != np.bool_:
        raise GenerationInputError(f"{name} must be BOOL (true or false), got {array.dtype}")
    return bool(_single(array, name))


@dataclasses.dataclass(frozen=True)
class InputNames:
    """What a request calls each setting, for the messages that name it: the model's own tensors, or the LLM
    convention's (``text_input`` and the ``sampling_parameters`` keys, :mod:`backends.llm_request`)."""

    prompt: str = "PROMPT"
    max_tokens: str = "MAX_TOKENS"
    temperature: str = "TEMPERATURE"
    stop: str = "STOP"
    chat: str = "CHAT"


def parse_request(
    tokenizer,
    prompt,
    max_tokens,
    temperature=None,
    stop=None,
    limits: Limits = Limits(),
    chat=None,
    template=None,
    names: InputNames = InputNames(),
    ignore_eos: bool = False,
) -> ParsedRequest:
    """Raw input arrays (``None`` where absent) -> a checked, tokenised request.

    ``template`` (a :class:`backends.chat.ChatTemplate`, or ``None`` for a model without one) formats the
    prompt when ``chat`` is true; the stream then ends at the template's end-of-turn token. ``ignore_eos``: the
    stream ends at ``max_tokens`` or the stop string only (benchmarks that fix the output length).
    """
    n = names
    if prompt is None:
        raise GenerationInputError(f"{n.prompt} is missing")
    # size checked before decoding
    text = _text(_single(prompt, n.prompt), n.prompt, limits.max_prompt_bytes, "MAX_PROMPT_BYTES")
    if not text.strip():
        raise GenerationInputError(f"{n.prompt} is empty")
    if max_tokens is None:
        raise GenerationInputError(f"{n.max_tokens} is missing")
    count = int(_single(max_tokens, n.max_tokens))
    if count < 1:
        raise GenerationInputError(f"{n.max_tokens} must be at least 1, got {count}")
    if count > limits.max_new_tokens:
        raise GenerationInputError(
            f"{n.max_tokens} {count} is over the limit of {limits.max_new_tokens} (MAX_NEW_TOKENS)"
        )
    temp = 0.0 if temperature is None else float(_single(temperature, n.temperature))
    if not math.isfinite(temp) or temp < 0:
        raise GenerationInputError(f"{n.temperature} must be a finite number >= 0 (0 = greedy), got {temp}")
    stop_text = "" if stop is None else _text(_single(stop, n.stop), n.stop, limits.max_stop_bytes, "MAX_STOP_BYTES")
    stop_ids = EOS_IDS
    if _chat_flag(chat, n.chat):
        if template is None:
            raise GenerationInputError(f"{n.chat} is true but this model has no chat template (chat_template.json)")
        from backends.chat import ChatTemplateError

        try:
            text = template.render(text)
        except ChatTemplateError as exc:
            raise GenerationInputError(f"{n.chat}: {exc}") from None
        stop_ids = template.stop_ids
    ids = tokenizer.encode(text).ids
    if not ids:
        raise GenerationInputError(f"{n.prompt} is empty after tokenisation")
    if len(ids) > limits.max_prompt_tokens:
        raise GenerationInputError(
            f"{n.prompt} is too long: {len(ids)} tokens, the limit is {limits.max_prompt_tokens} (MAX_PROMPT_TOKENS)"
        )
    return ParsedRequest(ids, count, temp, stop_text, frozenset() if ignore_eos else stop_ids)


def _byte_decoder() -> dict[str, int]:
    """GPT-2 byte-level BPE: the printable character that stands for each byte, inverted."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class TokenBytes:
    """Token id -> the bytes it stands for, from a byte-level BPE ``tokenizers.Tokenizer``."""

    def __init__(self, tokenizer):
        decoder = _byte_decoder()
        self.table: list[bytes] = []
        for i in range(tokenizer.get_vocab_size(with_added_tokens=True)):
            token = tokenizer.id_to_token(i)
            if token is None or i in SPECIAL_IDS:
                self.table.append(b"")
            elif all(ch in decoder for ch in token):
                self.table.append(bytes(decoder[ch] for ch in token))
            else:  # an added token written as plain text
                self.table.append(token.encode("utf-8"))

    def __call__(self, token_id: int) -> bytes:
        return self.table[token_id] if 0 <= token_id < len(self.table) else b""


class TokenStreamer:
    """Token ids in, complete UTF-8 text out; an invalid byte sequence becomes U+FFFD, never an error."""

    def __init__(self, token_bytes: TokenBytes):
        self.token_bytes = token_bytes
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self.decoder.decode(self.token_bytes(int(token_id)))

    def flush(self) -> str:
        return self.decoder.decode(b"", final=True)


class StopMatcher:
    """Cut the text stream before ``stop``; hold back a tail that could be the start of it."""

    def __init__(self, stop: str):
        self.stop = stop
        self.pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self.stop:
            return text
        self.pending += text
        at = self.pending.find(self.stop)
        if at >= 0:
            self.stopped = True
            out, self.pending = self.pending[:at], ""
            return out
        keep = 0
        for k in range(min(len(self.stop) - 1, len(self.pending)), 0, -1):
            if self.stop.startswith(self.pending[-k:]):
                keep = k
                break
        out = self.pending[: len(self.pending) - keep]
        self.pending = self.pending[len(self.pending) - keep :]
        return out

    def flush(self) -> str:
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out


def choose_tokens(logits, temperatures, generator=None):
    """logits torch [B, vocab], temperatures list[float] -> token ids torch [B] (argmax where 0)."""
    import torch

    tokens = logits.argmax(-1)
    for row, temp in enumerate(temperatures):
        if temp > 0:
            probs = torch.softmax(logits[row].float() / temp, dim=-1)
            tokens[row] = torch.multinomial(probs, 1, generator=generator)[0]
    return tokens
