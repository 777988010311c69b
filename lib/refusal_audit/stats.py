"""Statistics used by every study, each implemented once (pure numpy / scipy / statsmodels).

Each function is tested against an independent computation in tests/test_stats.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.contingency_tables import mcnemar as _sm_mcnemar
from statsmodels.stats.proportion import proportion_confint


@dataclass(frozen=True)
class Rate:
    """A proportion k/n with its Wilson confidence interval."""

    k: int
    n: int
    rate: float
    lo: float
    hi: float


def wilson(k: int, n: int, alpha: float = 0.05) -> Rate:
    """Wilson score interval for k successes out of n (statsmodels' ``method="wilson"``)."""
    if n <= 0:
        raise ValueError(f"wilson: n must be positive, got {n}")
    if not 0 <= k <= n:
        raise ValueError(f"wilson: need 0 <= k <= n, got k={k}, n={n}")
    lo, hi = proportion_confint(k, n, alpha=alpha, method="wilson")
    return Rate(int(k), int(n), k / n, float(lo), float(hi))


@dataclass(frozen=True)
class McNemar:
    """Exact McNemar test on paired binary outcomes.

    b = pairs positive under A only, c = pairs positive under B only.
    """

    b: int
    c: int
    n: int
    pvalue: float


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> McNemar:
    """Exact (binomial) McNemar test for two paired boolean vectors.

    The p-value is the two-sided binomial test of the discordant pairs at 1/2
    (statsmodels' ``mcnemar(exact=True)``).
    """
    a = np.asarray(a, dtype=bool)
    b = np.asarray(b, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"mcnemar_exact: need two paired 1-D vectors, got shapes {a.shape} and {b.shape}")
    only_a = int(np.sum(a & ~b))
    only_b = int(np.sum(~a & b))
    table = [[int(np.sum(a & b)), only_a], [only_b, int(np.sum(~a & ~b))]]
    p = 1.0 if only_a + only_b == 0 else float(_sm_mcnemar(table, exact=True).pvalue)
    return McNemar(only_a, only_b, len(a), p)


def bootstrap_diff_ci(
    a: np.ndarray, b: np.ndarray, n_boot: int, seed: int, alpha: float = 0.05
) -> tuple[float, float, float]:
    """Paired percentile bootstrap CI of mean(a) - mean(b), resampling pairs.

    Returns (estimate, lo, hi). Reproducible under ``seed``.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise ValueError(f"bootstrap_diff_ci: need two paired non-empty 1-D vectors, got {a.shape} and {b.shape}")
    if n_boot <= 0:
        raise ValueError(f"bootstrap_diff_ci: n_boot must be positive, got {n_boot}")
    d = a - b
    res = sps.bootstrap(
        (d,), np.mean, n_resamples=n_boot, confidence_level=1 - alpha,
        method="percentile", rng=np.random.default_rng(seed),
    )
    return float(d.mean()), float(res.confidence_interval.low), float(res.confidence_interval.high)


def rate_table(df: pd.DataFrame, by: list[str], outcome: str, alpha: float = 0.05) -> pd.DataFrame:
    """Rate of a boolean ``outcome`` per group of ``by``, with Wilson CIs."""
    rows = []
    for key, g in df.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        r = wilson(int(g[outcome].sum()), len(g), alpha)
        rows.append({**dict(zip(by, key)), "k": r.k, "n": r.n, "rate": r.rate, "ci_lo": r.lo, "ci_hi": r.hi})
    return pd.DataFrame(rows)


def paired_tests(
    df: pd.DataFrame, pair_key: str, arm: str, baseline: str, outcome: str, by: list[str],
    n_boot: int, seed: int, alpha: float = 0.05,
) -> pd.DataFrame:
    """For each group of ``by`` and each arm value other than ``baseline``: exact McNemar and the
    bootstrap CI of (baseline rate - arm rate), paired on ``pair_key``."""
    rows = []
    for key, g in df.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        wide = g.pivot_table(index=pair_key, columns=arm, values=outcome, aggfunc="first")
        if baseline not in wide:
            continue
        for other in sorted(c for c in wide.columns if c != baseline):
            pair = wide[[baseline, other]].dropna().astype(bool)
            if pair.empty:
                continue
            m = mcnemar_exact(pair[baseline].to_numpy(), pair[other].to_numpy())
            est, lo, hi = bootstrap_diff_ci(pair[baseline].to_numpy(), pair[other].to_numpy(), n_boot, seed, alpha)
            rows.append({**dict(zip(by, key)), "baseline": baseline, arm: other, "n_pairs": m.n,
                         "only_baseline": m.b, "only_arm": m.c, "mcnemar_p": m.pvalue,
                         "drop": est, "drop_lo": lo, "drop_hi": hi})
    return pd.DataFrame(rows)


def cohen_kappa(a, b) -> float:
    """Cohen's kappa between two raters' labels on the same items (sklearn's ``cohen_kappa_score``);
    NaN when both raters use a single identical label (kappa is undefined there)."""
    a, b = list(a), list(b)
    if len(a) != len(b) or not a:
        raise ValueError(f"cohen_kappa: need two equal-length non-empty label lists, got {len(a)} and {len(b)}")
    if len(set(a) | set(b)) < 2:
        return float("nan")
    return float(cohen_kappa_score(a, b))
