"""What a client does while the server cannot take a request: retry with capped, jittered backoff.

:class:`RetryPolicy`, :func:`retryable` and :func:`call_with_retry` import neither Locust nor gevent, so the tests' own
client threads and the Locust users (``loadtest/generators/locust/users.py``) share them. The server's side of a crashed
stub is :mod:`deploy.supervisor`.
"""

from __future__ import annotations

import dataclasses
import random
import re
import time
from collections.abc import Callable

RETRYABLE_HTTP = frozenset({429, 502, 503, 504})
RETRYABLE_GRPC = frozenset({"StatusCode.UNAVAILABLE", "StatusCode.RESOURCE_EXHAUSTED"})
RETRYABLE_TEXT = re.compile(
    r"stub process .* is not healthy|is not ready|not at ready state|unavailable", re.IGNORECASE
)


_HTTP_TEXT = re.compile(r"^HTTP (\d{3})\b")


def _status(exc: BaseException) -> str:
    """``"503"``, ``"StatusCode.UNAVAILABLE"`` (tritonclient's ``status()``), an ``HTTP 503: ...`` message's
    code (the project's own senders), or ``""``."""
    status = getattr(exc, "status", None)
    try:
        value = status() if callable(status) else status
    except Exception:  # noqa: BLE001
        value = None
    if value is None and (match := _HTTP_TEXT.match(str(exc))):
        value = match.group(1)
    return "" if value is None else str(value)


def retryable(exc: BaseException) -> bool:
    """Whether a failed request is worth sending again: the server could not take it *now*.

    Yes: HTTP 429/502/503/504, gRPC UNAVAILABLE or RESOURCE_EXHAUSTED, a refused or reset connection,
    and Triton's texts for a dead stub or a model between versions (``Stub process '...' is not healthy``,
    ``... is not ready``, ``unavailable``, whatever their status). No: every other 4xx (the input is
    wrong and stays wrong), other 5xx, and timeouts (the server may still be working on it).
    """
    status = _status(exc)
    if RETRYABLE_TEXT.search(str(exc)):
        return True
    if status.isdigit():
        return int(status) in RETRYABLE_HTTP
    if status in RETRYABLE_GRPC:
        return True
    return isinstance(exc, (ConnectionRefusedError, ConnectionResetError, BrokenPipeError))


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """``{"attempts": N, "backoff_ms": B}`` (and optionally ``max_backoff_ms``, default 2000).

    ``attempts`` is the most times one request is sent, the first included (1: no retry). Before retry k
    (k = 1, 2, ...) the client waits ``min(max_backoff, backoff * 2**(k-1))`` with equal jitter: half of it
    fixed, half uniformly random, so clients that failed together do not come back together.
    """

    attempts: int = 1
    backoff_ms: float = 50.0
    max_backoff_ms: float = 2000.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"retry attempts={self.attempts} must be >= 1")
        if self.backoff_ms < 0 or self.max_backoff_ms < 0:
            raise ValueError("retry backoff_ms and max_backoff_ms must be >= 0")

    @classmethod
    def from_settings(cls, settings: dict | None) -> RetryPolicy | None:
        """The policy of ``settings["retry"]``; None when absent (the default: no retry)."""
        raw = (settings or {}).get("retry")
        if not raw:
            return None
        unknown = set(raw) - {"attempts", "backoff_ms", "max_backoff_ms"}
        if unknown:
            raise ValueError(f"unknown retry keys {sorted(unknown)}")
        return cls(**{k: type(getattr(cls, k))(v) for k, v in raw.items()})

    def delay_s(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        full = min(self.max_backoff_ms, self.backoff_ms * 2 ** (retry - 1)) / 1000
        return full / 2 + (rng or random).uniform(0, full / 2)


def call_with_retry(
    send: Callable[[], object],
    policy: RetryPolicy | None,
    sleep: Callable[[float], None] | None = None,
    rng: random.Random | None = None,
    on_retry: Callable[[BaseException], None] | None = None,
):
    """``send()`` until it succeeds, fails for good (not :func:`retryable`) or runs out of attempts;
    returns ``(result, retries)``; the last error propagates. ``on_retry`` sees each error retried."""
    retries = 0
    while True:
        try:
            return send(), retries
        except Exception as exc:
            if policy is None or retries + 1 >= policy.attempts or not retryable(exc):
                raise
            retries += 1
            if on_retry:
                on_retry(exc)
            (sleep or time.sleep)(policy.delay_s(retries, rng))  # looked up now: gevent may have patched it
