"""Whether two bundles differ (`bench compare`): Welch's t-test on each side's mean, sd and repeats,
its two-sided p-value from Student's t distribution (through the regularized incomplete beta
function, written here: no scipy), then Benjamini-Hochberg across the rows of one comparison; and the
`mean ± sd` text. The statistics of one run and across repeats are bench/bundle/summary_stats.py's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# ----- significance ------------------------------------------------------------------------------
BETAINC_EPS = 1e-15  # relative change of the continued fraction at which it has converged
BETAINC_MAX_TERMS = 100_000
_TINY = 1e-300  # stands in for a zero denominator in Lentz's method


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) = B(x; a, b) / B(a, b), for a, b > 0, 0 <= x <= 1.

    I_x(a, b) = x^a (1-x)^b / (a B(a, b)) · 1 / (1 + d1 / (1 + d2 / (1 + ...))), with
    d(2m+1) = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)) and d(2m) = m(b-m) x / ((a+2m-1)(a+2m)), the continued
    fraction evaluated by Lentz's method. It converges quickly for x < (a+1)/(a+b+2); above that
    I_x(a, b) = 1 - I_(1-x)(b, a) is used."""
    if not (a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b)):
        raise ValueError(f"betainc needs finite a, b > 0 (got a={a}, b={b})")
    if not 0.0 <= x <= 1.0:  # NaN fails too
        raise ValueError(f"betainc needs 0 <= x <= 1 (got {x})")
    if x == 0.0 or x == 1.0:
        return x
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc_fraction(b, a, 1.0 - x)
    return _betainc_fraction(a, b, x)


def _betainc_fraction(a: float, b: float, x: float) -> float:
    log_beta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    prefactor = math.exp(a * math.log(x) + b * math.log1p(-x) - log_beta) / a
    # 1 / (1 + d1 / (1 + d2 / ...)): numerators 1, d1, d2, ..., every denominator 1. Lentz: the value is the
    # product of the ratios c·d of successive convergents, c and d kept away from zero.
    value, c, d = _TINY, _TINY, 0.0
    for j in range(1, BETAINC_MAX_TERMS):
        if j == 1:
            numerator = 1.0
        else:
            m, odd = divmod(j - 1, 2)  # the numerator of term j is d(j-1)
            if odd:
                numerator = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
            else:
                numerator = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d = 1.0 + numerator * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + numerator / c
        c = c if abs(c) > _TINY else _TINY
        ratio = c * d
        value *= ratio
        if j > 1 and abs(ratio - 1.0) < BETAINC_EPS:
            return min(1.0, max(0.0, prefactor * value))
    raise ArithmeticError(f"betainc({a}, {b}, {x}) did not converge")


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t distribution with df > 0 degrees of freedom (df may be fractional):
    I_(df/(df+t²))(df/2, 1/2)."""
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0 (got {df})")
    if math.isnan(t):
        raise ValueError("t is NaN")
    if math.isinf(t):
        return 0.0
    if math.isinf(df):  # the normal distribution
        return math.erfc(abs(t) / math.sqrt(2.0))
    # df / (df + t²) without overflowing t²: 1 / (1 + (t/√df)²)
    return betainc(df / 2.0, 0.5, 1.0 / (1.0 + (t / math.sqrt(df)) ** 2) if abs(t) < 1e150 else 0.0)


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t distribution with df degrees of freedom."""
    tail = t_two_sided_p(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of mean B - mean A. `t` and `df` are None when neither side varies (se 0): p is then
    1.0 for equal means and 0.0 for different ones."""

    t: float | None
    df: float | None
    p: float


def welch(mean_a: float, sd_a: float, n_a: int, mean_b: float, sd_b: float, n_b: int) -> Welch | None:
    """Welch's unequal-variance t-test from each side's mean, sample sd and count; None when a side has
    fewer than 2 values or a number is not finite (negative sd, overflow)."""
    if n_a < 2 or n_b < 2:
        return None
    numbers = (mean_a, sd_a, mean_b, sd_b)
    if not all(math.isfinite(v) for v in numbers) or sd_a < 0 or sd_b < 0:
        return None
    delta = mean_b - mean_a
    ea, eb = sd_a / math.sqrt(n_a), sd_b / math.sqrt(n_b)  # standard errors of each mean
    se = math.hypot(ea, eb)
    if not math.isfinite(delta) or not math.isfinite(se):
        return None
    if se == 0.0:
        return Welch(None, None, 1.0 if delta == 0.0 else 0.0)
    # Welch-Satterthwaite: df = se⁴ / (ea⁴/(n_a-1) + eb⁴/(n_b-1)), written with the shares ea²/se², eb²/se²
    share_a, share_b = (ea / se) ** 2, (eb / se) ** 2
    df = 1.0 / (share_a**2 / (n_a - 1) + share_b**2 / (n_b - 1))
    t = delta / se
    if not math.isfinite(t):
        return None
    return Welch(t, df, t_two_sided_p(t, df))


def benjamini_hochberg(p_values: Sequence[float | None], fdr: float = 0.05) -> tuple[list[bool], list[float | None]]:
    """Benjamini-Hochberg at false discovery rate `fdr` over the p-values given (None: not tested).

    Returns, in the input's order, whether each is a discovery and its adjusted p-value
    min over j >= rank of p_(j)·m/j (capped at 1; None where untested); a discovery is an adjusted p <= fdr,
    the same set the step-up rule (the largest k with p_(k) <= k/m·fdr, and every smaller p) gives."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    m = len(tested)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 1.0
    for rank in range(m, 0, -1):
        p, i = tested[rank - 1]
        running = min(running, p * m / rank)
        adjusted[i] = running
    return [a is not None and a <= fdr for a in adjusted], adjusted


def fmt_mean_sd(mean: float | None, sd: float | None, digits: int = 1) -> str:
    """'82.1 ± 0.4' (or 'n/a'), the way every summary shows a repeated measurement."""
    if mean is None:
        return "n/a"
    if sd is None:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"
