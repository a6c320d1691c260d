"""The LLM convention of Triton's vLLM backend, as ``text_generator`` takes it (no Triton import).

Inputs: ``text_input`` BYTES [1]; optional ``stream`` BOOL [1] (default false: one response with the whole
text), ``exclude_input_in_output`` BOOL [1] (default: true when streaming, false otherwise, as the vLLM
backend does; streaming with the prompt included is refused), ``sampling_parameters`` BYTES [1], a JSON
object. Without that tensor the request's own parameters are read instead (Triton's generate endpoint
passes the JSON keys that name no input, ``max_tokens`` and the ``parameters`` object, as request
parameters). Output: ``text_output`` BYTES.

The vLLM backend's optional BOOL flags asking for more outputs (:data:`RETURN_FLAGS`): ``num_input_tokens``
UINT32 [1] (the prompt's tokens, in every response), ``num_output_tokens`` UINT32 [1] (the tokens generated
since the previous response, so a stream's responses add up to its total), ``finish_reason`` BYTES [1] (in
the last response: ``stop`` at the end of sequence or a stop string, ``length`` at ``max_tokens``). Triton's
OpenAI-compatible frontend sends the first two with every request and reports them as the answer's usage.

The ``sampling_parameters`` keys this model applies (:data:`SAMPLING_KEYS`); a number may come as a JSON
number or a string (GenAI-Perf 0.0.16 sends ``{"max_tokens": "16"}``), a flag as a JSON boolean or
``"true"``/``"false"``. Keys it does not apply are accepted only at their neutral value (:data:`NEUTRAL`); any
other key is refused, naming it and the keys there are. ``chat`` is this model's own
key: true formats ``text_input`` with the model's chat template (the ``CHAT`` input of the model's own names).
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from backends.generation import GenerationInputError, InputNames, Limits, ParsedRequest, parse_request

DEFAULT_MAX_TOKENS = 16
"""``max_tokens`` when a request gives none: the vLLM backend's default (vLLM's ``SamplingParams``)."""
NAMES = InputNames(prompt="text_input", max_tokens="max_tokens", temperature="temperature", stop="stop", chat="chat")
SAMPLING_KEYS = {
    "max_tokens": "integer >= 1 (default 16)",
    "temperature": "number >= 0 (0, the default: greedy)",
    "stop": "a string, or a list of at most one string",
    "min_tokens": "integer from 0 to max_tokens: tokens generated before the end of sequence may end the answer",
    "ignore_eos": "boolean: generate max_tokens tokens even past the end of sequence",
    "chat": "boolean: format text_input with the model's chat template",
}
NEUTRAL = {
    "n": (1,),
    "best_of": (1,),
    "top_p": (1,),
    "top_k": (-1, 0),
    "frequency_penalty": (0,),
    "presence_penalty": (0,),
    "repetition_penalty": (1,),
    "logprobs": (False, 0),
}
"""Keys this model does not apply, accepted at the value that changes nothing: OpenAI-compatible clients (Triton's
OpenAI frontend with ``--backend vllm``) send their defaults (``n`` 1, ``top_p`` 1, penalties 0, ``logprobs``
false) with every request. Any other value is refused: silently ignoring it would answer something else."""
RETURN_FLAGS = {
    "return_num_input_tokens": "num_input_tokens",
    "return_num_output_tokens": "num_output_tokens",
    "return_finish_reason": "finish_reason",
}
"""Flag input -> the output it asks for."""
REFUSED_FLAGS = {"return_logprobs": "log probabilities"}
"""Flags for outputs this model does not produce: accepted only false (the frontend sends false by default)."""
IGNORED_PREFIX = "triton_"
"""Request parameters Triton itself sets (``triton_enable_empty_final_response``): not the client's settings."""


@dataclasses.dataclass(frozen=True)
class ConventionRequest:
    parsed: ParsedRequest
    stream: bool
    echo: str
    """The prompt, sent before the generated text when ``exclude_input_in_output`` is false; else empty."""
    returns: frozenset[str] = frozenset()
    """The outputs of :data:`RETURN_FLAGS` the request asked for."""


def _flag(value, name: str) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise GenerationInputError(f"{name} must be true or false, got {value!r}")


def _bool_input(array, name: str, default: bool) -> bool:
    if array is None:
        return default
    flat = np.asarray(array).reshape(-1)
    if flat.dtype != np.bool_ or flat.size != 1:
        raise GenerationInputError(f"{name} must be one BOOL, got {flat.size} of {flat.dtype}")
    return bool(flat[0])


def _same(value, neutral) -> bool:
    """``value`` (a JSON value, numbers maybe as strings) equals ``neutral``."""
    if isinstance(neutral, bool) or isinstance(value, bool):
        return isinstance(value, bool) and value is neutral or str(value).strip().lower() == str(neutral).lower()
    try:
        return float(value) == float(neutral)
    except (TypeError, ValueError):
        return False


def _number(value, name: str, kind):
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise GenerationInputError(f"sampling_parameters: {name} must be a number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise GenerationInputError(f"sampling_parameters: {name} must be a number, got {value!r}") from None
    if not math.isfinite(number) or (kind is int and number != int(number)):
        raise GenerationInputError(f"sampling_parameters: {name} must be {SAMPLING_KEYS[name]}, got {value!r}")
    return kind(number)


def sampling_parameters(raw, request_parameters: str | None) -> dict:
    """The sampling settings: the ``sampling_parameters`` tensor's JSON when given, else the request's
    parameters (JSON, as the Python backend's ``request.parameters()`` returns them)."""
    where = "sampling_parameters"
    if raw is not None:
        flat = np.asarray(raw).reshape(-1)
        if flat.size != 1:
            raise GenerationInputError(f"sampling_parameters must hold one JSON object, got {flat.size} elements")
        text = flat[0].decode("utf-8", "replace") if isinstance(flat[0], bytes) else str(flat[0])
    else:
        text, where = request_parameters or "{}", "the request's parameters"
    try:
        values = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise GenerationInputError(f"{where} is not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(values, dict):
        raise GenerationInputError(f"{where} must be a JSON object, got {type(values).__name__}")
    values = {k: v for k, v in values.items() if not str(k).startswith(IGNORED_PREFIX)}
    for key in sorted(set(values) & set(NEUTRAL)):
        value = values.pop(key)
        if not any(_same(value, neutral) for neutral in NEUTRAL[key]):
            raise GenerationInputError(
                f"sampling_parameters: {key} {value!r} is not applied by this model; only "
                f"{' or '.join(map(str, NEUTRAL[key]))}, which changes nothing, is accepted"
            )
    unknown = sorted(set(values) - set(SAMPLING_KEYS))
    if unknown:
        raise GenerationInputError(
            f"sampling_parameters: {', '.join(map(repr, unknown))} not applied by this model; its keys are "
            + "; ".join(f"{k} ({what})" for k, what in SAMPLING_KEYS.items())
        )
    return values


def parse_convention(
    tokenizer,
    text_input,
    stream=None,
    exclude_input_in_output=None,
    sampling=None,
    request_parameters: str | None = None,
    limits: Limits | None = None,
    template=None,
    flags: dict | None = None,
) -> ConventionRequest:
    """Raw input arrays of the convention (``None`` where absent) -> a checked, tokenised request. ``flags``:
    flag input name -> its raw array or ``None`` (:data:`RETURN_FLAGS`, :data:`REFUSED_FLAGS`)."""
    flags = flags or {}
    for name, what in REFUSED_FLAGS.items():
        if _bool_input(flags.get(name), name, False):
            raise GenerationInputError(f"{name} true is not supported: this model returns no {what}")
    returns = frozenset(out for name, out in RETURN_FLAGS.items() if _bool_input(flags.get(name), name, False))
    streaming = _bool_input(stream, "stream", False)
    exclude = _bool_input(exclude_input_in_output, "exclude_input_in_output", streaming)
    if streaming and not exclude:
        raise GenerationInputError("exclude_input_in_output false is not allowed with stream true (as in vLLM)")
    values = sampling_parameters(sampling, request_parameters)
    stop = values.get("stop")
    if isinstance(stop, list):
        if len(stop) > 1 or not all(isinstance(s, str) for s in stop):
            raise GenerationInputError(f"sampling_parameters: stop must be {SAMPLING_KEYS['stop']}, got {stop!r}")
        stop = stop[0] if stop else None
    elif stop is not None and not isinstance(stop, str):
        raise GenerationInputError(f"sampling_parameters: stop must be {SAMPLING_KEYS['stop']}, got {stop!r}")
    max_tokens = _number(values.get("max_tokens", DEFAULT_MAX_TOKENS), "max_tokens", int)
    temperature = _number(values.get("temperature", 0.0), "temperature", float)
    chat = _flag(values["chat"], "sampling_parameters: chat") if "chat" in values else None
    ignore_eos = _flag(values["ignore_eos"], "sampling_parameters: ignore_eos") if "ignore_eos" in values else False
    parsed = parse_request(
        tokenizer,
        text_input,
        np.array([max_tokens]),
        np.array([temperature], dtype=np.float32),
        None if not stop else np.array([stop.encode("utf-8")], dtype=np.object_),
        limits or Limits(),
        chat=None if chat is None else np.array([chat]),
        template=template,
        names=NAMES,
        ignore_eos=ignore_eos,
    )
    min_tokens = _number(values.get("min_tokens", 0), "min_tokens", int)
    if not 0 <= min_tokens <= parsed.max_tokens:
        raise GenerationInputError(
            f"sampling_parameters: min_tokens must be from 0 to max_tokens ({parsed.max_tokens}), got {min_tokens}"
        )
    prompt = "" if exclude else _prompt_text(text_input)
    return ConventionRequest(dataclasses.replace(parsed, min_tokens=min_tokens), streaming, prompt, returns)


def _prompt_text(text_input) -> str:
    value = np.asarray(text_input).reshape(-1)[0]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
