"""In-flight batching over the two exported steps (prefill, decode), with no Triton import.

``model_repository/text_generator`` drives it inside the server; ``loadtest.studies.generation`` drives
the same code in-process for the ceiling the served figures are compared with; the tests drive it
against the step-by-step reference.

* :class:`TorchScriptSteps`: the steps' TorchScript files loaded into this process, on the CPU or on
  ``cuda:<id>``; the KV caches stay on that device between steps.
* :class:`RunningBatch`: the running streams' state as one rectangular batch: last tokens [B, 1],
  attention mask [B, S] (0 on left padding), keys and values [B, layers, kv_heads, S, head_dim].
  :meth:`~RunningBatch.prefill` runs the prompts of newly arrived streams together,
  :meth:`~RunningBatch.add` merges the survivors of their first token into the batch (the shorter
  side is left-padded with mask 0), :meth:`~RunningBatch.decode` runs one step for every row and
  :meth:`~RunningBatch.advance` keeps the rows still generating. The caches are re-indexed only when
  a row leaves (a copy of the whole cache), and columns no remaining row attends to are cut.
* :func:`prefill_group`: how many of the waiting prompts one prefill call takes (a token budget, so
  a burst of long prompts neither stalls the running streams for long nor blows up memory).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch

PAD_ID = 2  # <|im_end|>, the GGUF's pad token; padded positions have mask 0 and never matter


class Steps(Protocol):
    device: torch.device

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor): ...

    def decode(self, ids: torch.Tensor, mask: torch.Tensor, keys: torch.Tensor, values: torch.Tensor): ...


class TorchScriptSteps:
    """The exported prefill and decode TorchScript files, run in this process on ``device``.

    ``optimized=False`` turns TorchScript's profiling executor off for these calls (as the libtorch
    backend's ``DISABLE_OPTIMIZED_EXECUTION``): it then runs every shape the same way from the first call.
    """

    def __init__(
        self, prefill_file: Path, decode_file: Path, device: str | torch.device = "cpu", optimized: bool = True
    ):
        self.device = torch.device(device)
        self.optimized = optimized
        self.prefill_module = torch.jit.load(str(prefill_file), map_location=self.device).eval()
        self.decode_module = torch.jit.load(str(decode_file), map_location=self.device).eval()

    def prefill(self, ids, mask):
        with torch.inference_mode(), torch.jit.optimized_execution(self.optimized):
            return self.prefill_module(ids, mask)

    def decode(self, ids, mask, keys, values):
        with torch.inference_mode(), torch.jit.optimized_execution(self.optimized):
            return self.decode_module(ids, mask, keys, values)


def left_pad(tensor: torch.Tensor, length: int, dim: int, value=0) -> torch.Tensor:
    """``tensor`` grown to ``length`` along ``dim`` by ``value`` on the left (unchanged if long enough)."""
    missing = length - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([torch.full(shape, value, dtype=tensor.dtype, device=tensor.device), tensor], dim=dim)


def prefill_group(lengths: Sequence[int], budget: int, room: int) -> int:
    """How many of the waiting prompts (``lengths`` in arrival order) the next prefill takes.

    At most ``room`` (free rows of the batch), and as many as keep rows x longest prompt (the padded
    tokens of one call) within ``budget``; always at least one when there is room, however long it is.
    """
    taken, longest = 0, 0
    for length in lengths[: max(0, room)]:
        if taken and (taken + 1) * max(longest, length) > budget:
            break
        taken, longest = taken + 1, max(longest, length)
    return taken


@dataclasses.dataclass
class Prefilled:
    """The result of one prefill call, before its rows join the batch."""

    logits: torch.Tensor
    """[n, vocab]: the next-token logits of each new row."""
    mask: torch.Tensor
    keys: torch.Tensor
    values: torch.Tensor


class RunningBatch:
    """The KV-cache state of the running streams; row ``i`` belongs to the caller's ``i``-th stream."""

    def __init__(self, steps: Steps, pad_id: int = PAD_ID):
        self.steps = steps
        self.device = torch.device(steps.device)
        self.pad_id = pad_id
        self.tokens = self.mask = self.keys = self.values = None

    @property
    def size(self) -> int:
        return 0 if self.tokens is None else int(self.tokens.shape[0])

    @property
    def context(self) -> int:
        """Columns of the KV cache (the longest row's context, padding included)."""
        return 0 if self.mask is None else int(self.mask.shape[1])

    def clear(self) -> None:
        self.tokens = self.mask = self.keys = self.values = None

    def prefill(self, prompts: Sequence[Sequence[int]]) -> Prefilled:
        """One prefill call for ``prompts`` (token ids), left-padded to the longest."""
        longest = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), longest), self.pad_id, dtype=torch.int64)
        mask = torch.zeros((len(prompts), longest), dtype=torch.int64)
        for row, prompt in enumerate(prompts):
            ids[row, longest - len(prompt) :] = torch.tensor(list(prompt), dtype=torch.int64)
            mask[row, longest - len(prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        logits, keys, values = self.steps.prefill(ids, mask)
        return Prefilled(logits, mask, keys, values)

    def add(self, new: Prefilled, tokens: torch.Tensor, keep: Sequence[int]) -> None:
        """Append the rows ``keep`` of ``new`` (their first generated ``tokens`` [n]) after the running rows."""
        if not keep:
            return
        tokens = tokens.to(self.device)
        if len(keep) < new.mask.shape[0]:
            index = torch.tensor(list(keep), dtype=torch.int64, device=self.device)
            tokens, mask, keys, values = tokens[index], new.mask[index], new.keys[index], new.values[index]
        else:
            mask, keys, values = new.mask, new.keys, new.values
        if self.tokens is None:
            self.tokens, self.mask, self.keys, self.values = tokens[:, None], mask, keys, values
            self._trim()
            return
        length = max(self.context, int(mask.shape[1]))
        self.tokens = torch.cat([self.tokens, tokens[:, None]])
        self.mask = torch.cat([left_pad(self.mask, length, 1), left_pad(mask, length, 1)])
        self.keys = torch.cat([left_pad(self.keys, length, 3), left_pad(keys, length, 3)])
        self.values = torch.cat([left_pad(self.values, length, 3), left_pad(values, length, 3)])

    def decode(self) -> torch.Tensor:
        """One decode step for every row: the last tokens in, next-token logits [B, vocab] out."""
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        logits, self.keys, self.values = self.steps.decode(self.tokens, self.mask, self.keys, self.values)
        return logits

    def advance(self, tokens: torch.Tensor, keep: Sequence[int]) -> None:
        """Record each row's new token [B]; keep only the rows ``keep`` (ascending row numbers)."""
        self.tokens = tokens.to(self.device)[:, None]
        self.retain(keep)

    def retain(self, keep: Sequence[int]) -> None:
        """Keep only the rows ``keep`` (ascending row numbers); the caches are copied only if a row goes."""
        keep = list(keep)
        if not keep:
            self.clear()
            return
        if len(keep) == self.size:
            return
        index = torch.tensor(keep, dtype=torch.int64, device=self.device)
        self.tokens, self.mask = self.tokens[index], self.mask[index]
        self.keys, self.values = self.keys[index], self.values[index]
        self._trim()

    def _trim(self) -> None:
        """Cut the leading columns that no row attends to (left padding of rows that are gone)."""
        first = int((self.mask.sum(0) > 0).nonzero()[0])
        if first:
            self.mask = self.mask[:, first:]
            self.keys, self.values = self.keys[:, :, :, first:], self.values[:, :, :, first:]
