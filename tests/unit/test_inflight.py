"""backends/inflight.py: the running batch against one-prompt-at-a-time greedy decoding (tiny model, eager)."""

from __future__ import annotations

import pytest
import torch

from backends.inflight import RunningBatch, left_pad, prefill_group
from export.zoo import smollm


class EagerSteps:
    device = torch.device("cpu")

    def __init__(self):
        llama = smollm.load_llama(tiny=True)
        self.prefill_module, self.decode_module = smollm.Prefill(llama), smollm.Decode(llama)
        self.decode_batches: list[int] = []

    def prefill(self, ids, mask):
        with torch.inference_mode():
            return self.prefill_module(ids, mask)

    def decode(self, ids, mask, keys, values):
        self.decode_batches.append(ids.shape[0])
        with torch.inference_mode():
            return self.decode_module(ids, mask, keys, values)


@pytest.fixture(scope="module")
def steps():
    return EagerSteps()


def reference(steps, prompt: str, tokens: int) -> list[int]:
    return smollm.greedy(steps.prefill_module, steps.decode_module, *smollm.encode_batch([prompt]), tokens)[0]


def test_streams_that_join_and_leave_get_the_tokens_they_would_get_alone(steps):
    """A joins first; B and C join two steps later (longer and shorter prompts); B leaves early, D joins."""
    prompts = {"A": (smollm.PROMPTS[0], 9), "B": (smollm.PROMPTS[3], 3), "C": (smollm.PROMPTS[2], 8), "D": ("Hello", 5)}
    joins = {0: ["A"], 2: ["B", "C"], 5: ["D"]}
    batch, rows, got = RunningBatch(steps), [], {name: [] for name in prompts}
    for step in range(20):
        if step in joins:
            names = joins[step]
            new = batch.prefill([smollm.tokenizer().encode(prompts[n][0]).ids for n in names])
            first = new.logits.argmax(-1)
            for n, t in zip(names, first.tolist(), strict=True):
                got[n].append(t)
            keep = [i for i, n in enumerate(names) if len(got[n]) < prompts[n][1]]
            batch.add(new, first, keep)
            rows += [names[i] for i in keep]
        if not rows:
            break
        tokens = batch.decode().argmax(-1)
        for n, t in zip(rows, tokens.tolist(), strict=True):
            got[n].append(t)
        keep = [i for i, n in enumerate(rows) if len(got[n]) < prompts[n][1]]
        batch.advance(tokens, keep)
        rows = [rows[i] for i in keep]
        assert batch.size == len(rows) and (not rows or batch.keys.shape[0] == len(rows))
    assert batch.size == 0
    for name, (prompt, count) in prompts.items():
        assert got[name] == reference(steps, prompt, count), name


def test_columns_nobody_attends_to_are_cut_when_the_longest_row_leaves(steps):
    batch = RunningBatch(steps)
    long_ids, short_ids = list(range(10, 40)), [11, 12]
    new = batch.prefill([long_ids, short_ids])
    batch.add(new, new.logits.argmax(-1), [0, 1])
    assert batch.context == 30
    batch.advance(batch.decode().argmax(-1), [1])  # the long row leaves
    assert batch.context == 3 and batch.keys.shape[3] == 3
    assert batch.mask.tolist() == [[1, 1, 1]]


def test_a_new_row_keeps_the_batch_and_pads_on_the_left(steps):
    batch = RunningBatch(steps)
    first = batch.prefill([[5, 6, 7]])
    batch.add(first, first.logits.argmax(-1), [0])
    second = batch.prefill([list(range(20, 30))])
    batch.add(second, second.logits.argmax(-1), [0])
    assert batch.size == 2 and batch.context == 10
    assert batch.mask[0].tolist() == [0] * 7 + [1] * 3


def test_advance_with_every_row_kept_does_not_copy_the_caches(steps):
    batch = RunningBatch(steps)
    new = batch.prefill([[5, 6, 7], [8, 9]])
    batch.add(new, new.logits.argmax(-1), [0, 1])
    logits = batch.decode()
    keys = batch.keys
    batch.advance(logits.argmax(-1), [0, 1])
    assert batch.keys is keys  # same tensor: no re-index when nobody left


def test_prefill_group_keeps_rows_times_longest_within_the_budget():
    assert prefill_group([10, 10, 10, 10], budget=30, room=8) == 3
    assert prefill_group([10, 50, 10], budget=60, room=8) == 1  # two rows padded to 50 = 100 > 60
    assert prefill_group([500], budget=64, room=8) == 1  # always one, however long
    assert prefill_group([1] * 40, budget=4096, room=32) == 32  # never past the free rows
    assert prefill_group([5, 5], budget=100, room=0) == 0


def test_left_pad():
    x = torch.ones(2, 3)
    assert left_pad(x, 5, 1).tolist() == [[0, 0, 1, 1, 1]] * 2
    assert left_pad(x, 2, 1) is x
