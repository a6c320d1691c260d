"""Evidence from repeated trials: the interval around each figure, the three-way SLO verdict, goodput, and the
A/B verdict of two things measured interleaved. Pure statistics: no server, no load generator.

The unit of evidence is a *trial*: one whole run of the load generator. On a shared machine the figures of two
runs minutes apart differ by far more than the sampling error of a percentile within one run of thousands of
requests, so intervals are taken over the trials' values, not over the requests of one run.

The interval is Student's t interval of the mean of the trials' values (``scipy.stats.t``). With the 3 to 10
trials a command can afford, a percentile bootstrap over the trials cannot be wider than their range and so
claims more than it knows; the t interval widens with few trials as it should. Its assumption (trial values
roughly normal around their mean) is mild for means of thousands of requests; docs/load-testing.md says so.
Latencies are taken on the log scale (``interval(log=True)``): a geometric mean with a multiplicative interval.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from loadtest.core.latency import buckets, new_histogram
from loadtest.core.metrics import HIGHER_IS_BETTER, METRICS, SHARES  # noqa: F401 (METRICS: evidence's)
from loadtest.errors import LoadTestError

CONFIDENCE = 0.95
MAX_TRIALS_ADVISED = 50
"""Past this many trials a verdict is called unlikely to settle (the estimate sits at the limit)."""


def _t_ppf(q: float, dof: float) -> float:
    """Student's t quantile; scipy is imported here, not with the module (about 1 s for every command)."""
    from scipy import stats

    return float(stats.t.ppf(q, dof))


class EvidenceError(LoadTestError):
    """An interval or a verdict was asked of too little data (fewer than two trials where one is needed)."""


class Verdict(enum.StrEnum):
    """The SLO verdict: the interval is inside the budget, outside it, or straddles it."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


class Difference(enum.StrEnum):
    """The A/B verdict for one metric, B against A."""

    BETTER = "better"
    WORSE = "worse"
    SAME = "no difference"
    INCONCLUSIVE = "inconclusive"


@dataclasses.dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval over ``trials`` trials (low == high == estimate for one)."""

    estimate: float
    low: float
    high: float
    trials: int
    confidence: float = CONFIDENCE

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def relative_width(self) -> float:
        """Full width over the estimate (0.15: the interval spans 15% of the estimate)."""
        return (self.high - self.low) / abs(self.estimate) if self.estimate else math.inf

    @property
    def has_interval(self) -> bool:
        return self.trials >= 2

    def text(self, fmt: str = "{:.3f}", unit: str = "") -> str:
        """``7371.0 req/s (95% CI 6900.2-7802.4, 5 trials)``; one trial says it has no interval."""
        if math.isnan(self.estimate):
            return "n/a"
        value = fmt.format(self.estimate) + unit
        if not self.has_interval:
            return f"{value} (1 trial, no interval)"
        return (
            f"{value} ({self.confidence:.0%} CI {fmt.format(self.low)}-{fmt.format(self.high)}, {self.trials} trials)"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Interval:
        return cls(**raw)


def _finite(values: Sequence[float]) -> np.ndarray:
    array = np.asarray([v for v in values if v is not None], dtype=float)
    return array[np.isfinite(array)]


def interval(
    values: Sequence[float],
    confidence: float = CONFIDENCE,
    *,
    lower_bound: float | None = None,
    upper_bound: float | None = None,
    log: bool = False,
) -> Interval:
    """Student's t interval of the mean of the trials' values (NaNs left out). One value: no interval
    (low == high). ``lower_bound`` / ``upper_bound`` clip the interval where the quantity cannot go (0 for rates
    and shares, 1 for shares).
    ``log``: on the log scale (for latencies: positive and skewed), i.e. the geometric mean with a
    multiplicative interval that never reaches 0, so a tiny budget is failed, not straddled."""
    array = _finite(values)
    if log and len(array) > 1 and (array > 0).all():  # one value is its own mean on either scale
        iv = interval(np.log(array), confidence)
        return Interval(*(math.exp(v) for v in (iv.estimate, iv.low, iv.high)), iv.trials, confidence)
    n = len(array)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, confidence)
    mean = float(array.mean())
    if n == 1:
        return Interval(mean, mean, mean, 1, confidence)
    sem = float(array.std(ddof=1)) / math.sqrt(n)
    half = _t_ppf((1 + confidence) / 2, n - 1) * sem
    low, high = mean - half, mean + half
    if lower_bound is not None:
        low = max(low, lower_bound)
    if upper_bound is not None:
        high = min(high, upper_bound)
    return Interval(mean, low, high, n, confidence)


def prediction_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Where one more value from the trials' distribution falls with ``confidence``: the mean ± t s √(1 + 1/n),
    Student's prediction interval (NaNs left out). It is wider than the mean's interval by √(n + 1): with 3
    trials, a new value falls outside the mean's 95% interval about one time in six by chance alone, outside
    this one in twenty. Fewer than 2 values: unbounded (any value is consistent with them)."""
    array = _finite(values)
    n = len(array)
    if n < 2:
        mean = float(array.mean()) if n else math.nan
        return Interval(mean, -math.inf, math.inf, n, confidence)
    mean = float(array.mean())
    half = _t_ppf((1 + confidence) / 2, n - 1) * float(array.std(ddof=1)) * math.sqrt(1 + 1 / n)
    return Interval(mean, mean - half, mean + half, n, confidence)


def figure_interval(metric: str, values: Sequence[float]) -> Interval:
    """The interval a report shows for one figure over trials, on the scale the SLO verdict judges it: latencies
    (``*_ms``) on the log scale, shares within [0, 1], every other figure (rates) at least 0."""
    if metric.endswith("_ms"):
        return interval(values, lower_bound=0.0, log=True)
    return interval(values, lower_bound=0.0, upper_bound=1.0 if metric in SHARES else None)


def require_trials(trials: int, flag: str = "--trials") -> int:
    """A trial count for a command that reports intervals: at least 2 (EvidenceError otherwise)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 2:
        raise EvidenceError(f"{flag} {trials!r}: an interval needs at least 2 trials")
    return trials


def interleaved(arms: Sequence[str], trials: int) -> list[tuple[int, str]]:
    """The order to measure ``arms`` in: round by round, every arm once a round, never all trials of one arm
    first (A A B B). Odd rounds run backwards (A B, B A, A B, ...), so a drift of the machine within a round
    falls on every arm alike once rounds are paired, not always on the arm measured last. ``(round, arm)``."""
    if len(set(arms)) != len(arms):
        raise EvidenceError(f"arms {list(arms)} must have distinct names")
    if trials < 1:
        raise EvidenceError(f"trials={trials} must be >= 1")
    return [(r, arm) for r in range(trials) for arm in (arms if r % 2 == 0 else list(reversed(arms)))]


TAIL_REQUESTS = 10
"""Requests a run should have above a percentile for that percentile to be more than its slowest one or two."""


def requests_for(quantile: float = 0.99) -> int:
    """The fewest requests a run needs to put ``TAIL_REQUESTS`` above its ``quantile`` (1,000 for p99)."""
    if not 0 < quantile < 1:
        raise EvidenceError(f"quantile={quantile!r} must be in (0, 1)")
    return math.ceil(TAIL_REQUESTS / (1 - quantile))


def thin_tail(requests: float, quantile: float = 0.99) -> str:
    """ "" when a run of ``requests`` puts at least ``TAIL_REQUESTS`` above its ``quantile``; else a sentence
    saying that its percentile is its slowest request or so, and how many requests a run needs. More trials of
    such runs narrow an interval slowly: each trial's value is one stall away from another."""
    needed = requests_for(quantile)
    above = requests * (1 - quantile)
    if above >= TAIL_REQUESTS:
        return ""
    name = f"p{quantile * 100:g}"
    return (
        f"a run of about {requests:,.0f} requests has {above:.1f} above its {name}, so its {name} is its slowest "
        f"request or so; runs of at least {needed:,} requests ({TAIL_REQUESTS} above the {name}) give a {name} "
        "that moves less between trials"
    )


def trials_to_settle(
    values: Sequence[float], limit: float, confidence: float = CONFIDENCE, *, log: bool = False
) -> int | None:
    """How many trials in all would likely put the interval on one side of ``limit``, if the mean and spread
    stay what they are; None when the mean sits on the limit (no number of trials would settle it) or it
    would take more than ``MAX_TRIALS_ADVISED``. At least the trials already run."""
    array = _finite(values)
    if log:
        if not (len(array) and (array > 0).all() and limit > 0):
            return None
        array, limit = np.log(array), math.log(limit)
    n = len(array)
    if n < 2:
        return None
    gap = abs(float(array.mean()) - limit)
    sd = float(array.std(ddof=1))
    if sd == 0:
        return n if gap > 0 else None
    if gap == 0:
        return None
    for total in range(max(n, 2), MAX_TRIALS_ADVISED + 1):
        if _t_ppf((1 + confidence) / 2, total - 1) * sd / math.sqrt(total) < gap:
            return total
    return None


# --- the SLO verdict ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Limit:
    """One limit of an SLO, judged on its interval: ``value <= bound`` must hold."""

    name: str
    """What is limited, as reports name it: ``p99``, ``error rate``, ``goodput``."""
    interval: Interval
    bound: float
    unit: str = ""
    fmt: str = "{:.3f}"
    at_least: bool = False
    """The limit is a floor (goodput >= bound), not a ceiling."""
    log: bool = False
    """The interval is on the log scale (latencies): trials that would settle it are counted there too."""

    @property
    def verdict(self) -> Verdict:
        iv = self.interval
        if math.isnan(iv.estimate):
            return Verdict.FAIL
        worst, best = (iv.low, iv.high) if self.at_least else (iv.high, iv.low)
        holds = (lambda v: v >= self.bound) if self.at_least else (lambda v: v <= self.bound)
        if holds(worst):
            return Verdict.PASS
        if not holds(best):
            return Verdict.FAIL
        return Verdict.INCONCLUSIVE

    def sentence(self) -> str:
        iv = self.interval
        relation = ">=" if self.at_least else "<="
        bound = self.fmt.format(self.bound) + self.unit
        if math.isnan(iv.estimate):
            return f"{self.name}: no value (no request succeeded)"
        span = (
            f"{self.fmt.format(iv.estimate)}{self.unit}"
            if not iv.has_interval
            else f"{self.fmt.format(iv.estimate)}{self.unit} (CI {self.fmt.format(iv.low)}-{self.fmt.format(iv.high)})"
        )
        return {
            Verdict.PASS: f"{self.name} {span} holds {relation} {bound}",
            Verdict.FAIL: f"{self.name} {span} misses {relation} {bound}",
            Verdict.INCONCLUSIVE: f"{self.name} {span} straddles {bound}",
        }[self.verdict]


@dataclasses.dataclass(frozen=True)
class SloVerdict:
    verdict: Verdict
    limits: tuple[Limit, ...]
    settle: str = ""
    """For an inconclusive verdict: how many more trials would likely settle it (or that none would)."""

    @property
    def reasons(self) -> list[str]:
        """One sentence per limit that did not pass."""
        return [limit.sentence() for limit in self.limits if limit.verdict is not Verdict.PASS]

    def text(self) -> str:
        body = "; ".join(limit.sentence() for limit in self.limits)
        out = f"{self.verdict.value.upper()}: {body}"
        return f"{out}. {self.settle}" if self.settle else out

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "limits": [
                {"name": lim.name, "bound": lim.bound, "verdict": lim.verdict.value, **lim.interval.to_dict()}
                for lim in self.limits
            ],
            "settle": self.settle,
        }


def judge(limits: Sequence[Limit], samples: dict[str, Sequence[float]] | None = None) -> SloVerdict:
    """The SLO's verdict over its limits: fail if any limit fails, inconclusive if any straddles, else pass.
    ``samples`` (limit name -> the trials' values) lets an inconclusive verdict say how many trials would
    likely settle it."""
    verdicts = [limit.verdict for limit in limits]
    if Verdict.FAIL in verdicts:
        return SloVerdict(Verdict.FAIL, tuple(limits))
    if Verdict.INCONCLUSIVE not in verdicts:
        return SloVerdict(Verdict.PASS, tuple(limits))
    notes = []
    for limit in limits:
        if limit.verdict is not Verdict.INCONCLUSIVE:
            continue
        values = (samples or {}).get(limit.name)
        total = trials_to_settle(values, limit.bound, log=limit.log) if values is not None else None
        if total is None:
            notes.append(f"{limit.name} sits at its limit: more trials are unlikely to settle it")
        else:
            notes.append(
                f"about {total - limit.interval.trials} more trials ({total} in all) would likely settle {limit.name}"
            )
    return SloVerdict(Verdict.INCONCLUSIVE, tuple(limits), "; ".join(notes))


# --- shares of a count ----------------------------------------------------------------------------


def count_interval(count: int, total: int, trials: int, confidence: float = CONFIDENCE) -> Interval:
    """The share ``count / total`` counted over every request of every trial, with its exact (Clopper-Pearson)
    ``confidence`` interval: three error-free trials of 1,000 requests bound an error rate below 0.12%, not 0,
    and one error in them is certainly above 0. NaN with nothing counted."""
    if total <= 0:
        return Interval(math.nan, math.nan, math.nan, trials, confidence)
    from scipy.stats import binomtest

    ci = binomtest(int(count), int(total)).proportion_ci(confidence, method="exact")
    return Interval(count / total, float(ci.low), float(ci.high), trials, confidence)


def share_lower_bound(count: int, total: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided ``confidence`` lower bound of the share ``count / total`` (Wilson's score bound): how
    small the true share may be given what was counted. 0 with nothing counted. One late request of 7 is a 14 %
    share but a 3 % lower bound: not evidence of a share above 5 %."""
    if total <= 0 or count <= 0:
        return 0.0
    from statistics import NormalDist

    z = NormalDist().inv_cdf(confidence)
    p, n = count / total, total
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


# --- goodput --------------------------------------------------------------------------------------


def goodput(within_budget: int, requests: int, duration_s: float) -> tuple[float, float]:
    """Goodput as (share, rate): requests answered without error within the latency budget, over all requests
    offered, and per second. ``within_budget`` counts successes whose latency is at most the budget."""
    if requests <= 0:
        return math.nan, 0.0
    return within_budget / requests, within_budget / duration_s if duration_s > 0 else 0.0


def count_within(hdr: str, budget_ms: float) -> int:
    """Successes at most ``budget_ms`` in an encoded HDR histogram of µs latencies (all of them for an infinite
    budget). The histogram's resolution (4 significant digits) decides a value within 0.05% of the budget."""
    if not hdr:
        return 0
    hist = new_histogram()
    hist.decode_and_add(hdr)
    if not math.isfinite(budget_ms):
        return int(hist.get_total_count())
    limit_us = budget_ms * 1000
    return sum(count for _, highest, count in buckets(hist) if highest <= limit_us)


# --- A/B ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Comparison:
    """B against A for one metric, from trials measured interleaved."""

    metric: str
    a: Interval
    b: Interval
    change: Interval
    """B relative to A: the ratio B/A minus one (paired by round when the trials pair up), e.g. -0.12 is 12%
    lower. An absolute difference when a value is not positive (an error rate of 0)."""
    relative: bool
    min_effect: float
    verdict: Difference

    def text(self) -> str:
        c = self.change
        if self.relative:
            span = f"{c.estimate:+.1%} (CI {c.low:+.1%} to {c.high:+.1%})"
        else:
            span = f"{c.estimate:+.4f} (CI {c.low:+.4f} to {c.high:+.4f})"
        if self.verdict in (Difference.BETTER, Difference.WORSE):
            head = f"{self.metric}: B is {self.verdict.value} than A"
        else:
            head = f"{self.metric}: {self.verdict.value}"
        effect = f"{self.min_effect:.0%}" if self.relative else f"{self.min_effect:g}"
        return f"{head}; change {span}, minimum effect +-{effect}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "a": self.a.to_dict(),
            "b": self.b.to_dict(),
            "change": self.change.to_dict(),
            "relative": self.relative,
            "min_effect": self.min_effect,
            "verdict": self.verdict.value,
        }


def compare(
    metric: str, a_values: Sequence[float], b_values: Sequence[float], min_effect: float, confidence: float = CONFIDENCE
) -> Comparison:
    """B against A: *no difference* when the whole interval of the change lies within +-``min_effect``;
    *better* or *worse* when the interval excludes no change and the estimate is beyond the minimum effect;
    else *inconclusive* (a change that is surely there but may be smaller than the minimum effect is not yet a
    regression). Trials of equal count pair by round (the interleaved order), which cancels the machine's drift
    between rounds."""
    a, b = _finite(a_values), _finite(b_values)
    if len(a) < 2 or len(b) < 2:
        raise EvidenceError(f"{metric}: comparing needs at least 2 trials of each side, got {len(a)} and {len(b)}")
    if not min_effect >= 0:
        raise EvidenceError(f"minimum effect {min_effect!r} must be >= 0")
    relative = bool((a > 0).all() and (b > 0).all())
    if len(a) == len(b):
        diffs = np.log(b / a) if relative else b - a
        change = interval(diffs, confidence)
    else:  # unpaired: Welch's interval of the difference of the means (of the logs for a ratio)
        xa, xb = (np.log(a), np.log(b)) if relative else (a, b)
        change = _welch(xa, xb, confidence)
    if relative:
        change = Interval(
            *(math.expm1(v) for v in (change.estimate, change.low, change.high)), change.trials, confidence
        )
    higher_better = metric in HIGHER_IS_BETTER
    if -min_effect <= change.low and change.high <= min_effect:
        verdict = Difference.SAME
    elif change.low > 0 and change.estimate > min_effect:
        verdict = Difference.BETTER if higher_better else Difference.WORSE
    elif change.high < 0 and change.estimate < -min_effect:
        verdict = Difference.WORSE if higher_better else Difference.BETTER
    else:
        verdict = Difference.INCONCLUSIVE
    return Comparison(metric, interval(a, confidence), interval(b, confidence), change, relative, min_effect, verdict)


def compare_counts(
    metric: str, a: tuple[int, int], b: tuple[int, int], min_effect: float, confidence: float = CONFIDENCE
) -> Comparison:
    """B against A for a share counted over every request of both arms' trials, (count, total) each (an error
    rate): the change is the difference of the shares, with Newcombe's hybrid score interval built from each
    share's Wilson interval (scipy's ``binomtest``); the verdict follows ``compare``'s rule with an absolute
    ``min_effect``. Lower is better."""
    from scipy.stats import binomtest

    (ca, na), (cb, nb) = a, b
    if na <= 0 or nb <= 0:
        raise EvidenceError(f"{metric}: comparing counts needs requests on both sides, got {na} and {nb}")
    ia, ib = (binomtest(int(c), int(n)).proportion_ci(confidence, method="wilson") for c, n in (a, b))
    pa, pb = ca / na, cb / nb
    diff = pb - pa
    low = diff - math.sqrt((pb - ib.low) ** 2 + (ia.high - pa) ** 2)
    high = diff + math.sqrt((ib.high - pb) ** 2 + (pa - ia.low) ** 2)
    change = Interval(diff, low, high, 2, confidence)
    if -min_effect <= low and high <= min_effect:
        verdict = Difference.SAME
    elif low > 0 and diff > min_effect:
        verdict = Difference.WORSE
    elif high < 0 and diff < -min_effect:
        verdict = Difference.BETTER
    else:
        verdict = Difference.INCONCLUSIVE
    sides = (Interval(pa, ia.low, ia.high, 2, confidence), Interval(pb, ib.low, ib.high, 2, confidence))
    return Comparison(metric, *sides, change, False, min_effect, verdict)


def _welch(a: np.ndarray, b: np.ndarray, confidence: float) -> Interval:
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = float(b.mean() - a.mean())
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(diff, diff, diff, min(len(a), len(b)), confidence)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = _t_ppf((1 + confidence) / 2, dof) * se
    return Interval(diff, diff - half, diff + half, min(len(a), len(b)), confidence)
