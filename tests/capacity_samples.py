"""A recorded latency-against-rate curve with noise, and single runs, for the unit tests of the capacity search
and its answer (test_capacity.py, test_capacity_result.py)."""

from __future__ import annotations

import math

import numpy as np

from loadtest.core.measurement import Measurement
from loadtest.core.spec import Slo

# A served model's p99 against the offered rate, as recorded (req/s, ms): flat, then the queue builds.
RECORDED = [(10, 3.1), (50, 3.3), (100, 3.6), (200, 4.2), (400, 6.0), (600, 11.0), (800, 30.0), (900, 70.0)]
SATURATES_AT = 950.0
"""Past this rate the server completes no more: it falls behind."""
BUDGET = Slo(50.0)
TRUE_KNEE = 800 + 100 * math.log(50 / 30) / math.log(70 / 30)
"""Where the recorded curve (log p99 linear between points) crosses 50 ms: 30 ms at 800, 70 ms at 900 (860.3)."""


class Curve:
    """rate -> Measurement from the recorded table: p99 interpolated on log p99, multiplied by lognormal noise
    of ``noise`` (sd of the log); throughput the rate up to saturation, with Poisson-like noise."""

    def __init__(self, noise: float = 0.05, seed: int = 1, queue_ms=lambda rate: rate / 100):
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.queue_ms = queue_ms
        self.rates: list[float] = []

    def p99(self, rate: float) -> float:
        rates, p99s = zip(*RECORDED, strict=True)
        if rate > rates[-1]:  # past the table: doubling every 50 req/s
            return p99s[-1] * 2 ** ((rate - rates[-1]) / 50)
        return float(np.exp(np.interp(rate, rates, np.log(p99s))))

    def __call__(self, rate: float) -> Measurement:
        self.rates.append(rate)
        completed = min(rate, SATURATES_AT) * (1 + self.rng.normal(0, 0.01))
        p99 = self.p99(rate) * math.exp(self.rng.normal(0, self.noise))
        return Measurement(
            throughput=completed,
            p50_ms=p99 / 3,
            p99_ms=p99,
            error_rate=0.0,
            generator="recorded",
            offered_rate=rate,
            sent_rate=rate,
            server={"queue_ms": self.queue_ms(rate)},
        )


def quiet(_line: str) -> None:
    pass


def m(rate: float, p99: float = 5.0, **kwargs) -> Measurement:
    values = {"throughput": rate, "p50_ms": p99 / 2, "p99_ms": p99, "error_rate": 0.0, "generator": "test"}
    values.update(kwargs)
    return Measurement(**values)
