"""Statistics used by every study, each implemented once (pure numpy / scipy / statsmodels).

Each function is tested against an independent computation in tests/test_stats.py.
"""
from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import statsmodels.api as sm
import statsmodels.formula.api as smf
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
    """Wilson score interval for k successes out of n (statsmodels' ``method="wilson"``). It always holds
    k / n; statsmodels' floating point can leave it out by an ulp at k = 0 or n (12 of 12: hi = 1 - 1e-16),
    so the bounds are clipped to it."""
    if n <= 0:
        raise ValueError(f"wilson: n must be positive, got {n}")
    if not 0 <= k <= n:
        raise ValueError(f"wilson: need 0 <= k <= n, got k={k}, n={n}")
    lo, hi = proportion_confint(k, n, alpha=alpha, method="wilson")
    return Rate(int(k), int(n), k / n, min(float(lo), k / n), max(float(hi), k / n))


@dataclass(frozen=True)
class Chance:
    """A multiple-choice check's answers against chance: its accuracy (Wilson), the most given answer and its
    share, and whether the check is at chance (the interval reaches 1 / ``choices``) or answered by one letter
    (that share at least ``one_letter``)."""

    rate: Rate
    letter: str
    share: float
    at_chance: bool
    one_letter: bool


def chance_check(replies, correct, choices: int = 4, alpha: float = 0.05, one_letter: float = 0.8) -> Chance:
    """A capability check that measures nothing: accuracy not shown above 1 / ``choices`` (the Wilson interval's
    low end at or below it), or one answer given to at least ``one_letter`` of the questions."""
    replies = pd.Series(replies, dtype=str).str.strip()
    rate = wilson(int(np.sum(np.asarray(correct, dtype=bool))), len(replies), alpha)
    counts = replies.value_counts()
    letter, share = str(counts.index[0]), float(counts.iloc[0] / len(replies))
    return Chance(rate, letter, share, rate.lo <= 1 / choices, share >= one_letter)


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


@dataclass(frozen=True)
class SignFlip:
    """A paired sign-flip randomization test of mean(d) = 0, with the paired bootstrap CI of mean(d)."""

    n: int
    estimate: float
    lo: float
    hi: float
    pvalue: float
    exact: bool


def sign_flip_test(d, n_boot: int, seed: int, alpha: float = 0.05, max_exact: int = 16,
                   n_resamples: int = 20_000) -> SignFlip:
    """Two-sided sign-flip test of H0: the paired differences ``d`` are symmetric about 0 (under the
    sharp null that the two conditions of each pair are exchangeable, swapping them flips the sign of
    its difference), statistic |mean(d)| (``sign_flip_pvalue``), with the percentile bootstrap CI of
    mean(d), resampling pairs (``bootstrap_diff_ci``)."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 1 or len(d) == 0:
        raise ValueError(f"sign_flip_test: need a non-empty 1-D vector, got shape {d.shape}")
    est, lo, hi = bootstrap_diff_ci(d, np.zeros_like(d), n_boot, seed, alpha)
    p, exact = sign_flip_pvalue(d, seed, max_exact, n_resamples)
    return SignFlip(len(d), est, lo, hi, p, exact)


def sign_flip_pvalue(d, seed: int = 0, max_exact: int = 16, n_resamples: int = 20_000) -> tuple[float, bool]:
    """(p, exact) of the two-sided sign-flip test of ``d`` (statistic |sum of d|). Integer-valued ``d``
    (the kv study's d in {-2, ..., 2}): exact at any n, the distribution of the signed sum being a
    convolution of one binomial per distinct |d| (``_lattice_pvalue``). Otherwise exact over every sign
    pattern of the non-zero differences when there are at most ``max_exact``, else ``n_resamples``
    random patterns (p = (1 + hits) / (1 + resamples))."""
    nz = np.asarray(d, dtype=float)
    nz = nz[nz != 0]
    if len(nz) == 0:
        return 1.0, True
    if np.all(nz == np.round(nz)):
        mags = np.abs(nz).astype(int)
        values, counts = np.unique(mags, return_counts=True)
        return _lattice_pvalue(tuple(zip(values.tolist(), counts.tolist())), int(abs(nz.sum()))), True
    observed = abs(nz.sum()) - 1e-9 * len(nz)  # sums over the same non-zero terms; a tolerance for ties
    if len(nz) <= max_exact:
        signs = 1 - 2 * ((np.arange(2 ** len(nz))[:, None] >> np.arange(len(nz))) & 1)
        return float(np.mean(np.abs(signs @ nz) >= observed)), True
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n_resamples, len(nz)))
    hits = int(np.sum(np.abs(signs @ nz) >= observed))
    return (1 + hits) / (1 + n_resamples), False


@functools.lru_cache(maxsize=65536)
def _lattice_pvalue(magnitudes: tuple[tuple[int, int], ...], observed: int) -> float:
    """P(|sum of s_i m_i| >= observed) over independent equiprobable signs s_i, for positive integer
    magnitudes given as (value, count): the signs of the ``count`` terms of one value sum to
    value * (2 * Binomial(count, 1/2) - count), and the terms of different values are convolved."""
    dist, low = np.ones(1), 0  # the distribution of the sum over the values lo, lo + 1, ...
    for value, count in magnitudes:
        kernel = np.zeros(2 * value * count + 1)
        kernel[::2 * value] = sps.binom.pmf(np.arange(count + 1), count, 0.5)
        dist, low = np.convolve(dist, kernel), low - value * count
    sums = np.arange(low, low + len(dist))
    return float(min(1.0, dist[np.abs(sums) >= observed].sum()))


def sign_flip_pvalues(d) -> np.ndarray:
    """``sign_flip_pvalue`` of each row of an integer array (a simulation's replicates), each distinct
    (|d| counts, |sum|) computed once."""
    d = np.asarray(d)
    if d.ndim != 2 or not np.issubdtype(d.dtype, np.integer):
        raise ValueError(f"sign_flip_pvalues: need a 2-D integer array, got {d.dtype} of shape {d.shape}")
    mags = np.abs(d)
    top = max(int(mags.max(initial=0)), 1)
    keys = np.column_stack([(mags == v).sum(axis=1) for v in range(1, top + 1)] + [np.abs(d.sum(axis=1))])
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    p = [_lattice_pvalue(tuple((v + 1, int(c)) for v, c in enumerate(k[:-1]) if c), int(k[-1])) if k[:-1].any()
         else 1.0 for k in unique]
    return np.asarray(p)[np.ravel(inverse)]


def sign_flip_min_difference(n: int, alpha: float, family_size: int = 1) -> tuple[float, int]:
    """(smallest |mean(d)|, its number of pairs k) that the sign-flip test of ``n`` pairs can declare
    significant after Holm over ``family_size`` tests, i.e. with family_size * p < alpha (Holm's first
    step: the member with the family's smallest p); (NaN, 0) when no d of length n can. The minimum is k
    pairs with d = +1 and the rest 0, p = 2 / 2^k: a |d| of 2 or a pair of the other sign gives the
    same |sum| only with a larger p (tested by enumeration over every d in {-2, ..., 2}^n)."""
    for k in range(1, n + 1):
        if family_size * sign_flip_pvalue(np.ones(k))[0] < alpha:
            return k / n, k
    return float("nan"), 0


def cohen_kappa(a, b) -> float:
    """Cohen's kappa between two raters' labels on the same items (sklearn's ``cohen_kappa_score``);
    NaN when both raters use a single identical label (kappa is undefined there)."""
    a, b = list(a), list(b)
    if len(a) != len(b) or not a:
        raise ValueError(f"cohen_kappa: need two equal-length non-empty label lists, got {len(a)} and {len(b)}")
    if len(set(a) | set(b)) < 2:
        return float("nan")
    return float(cohen_kappa_score(a, b))


# --- frames study: per-item frame contrasts and the paraphrase-noise band -------------------------
# Source: arXiv 2605.06327 (evaluation-context divergence), section 3 (estimand) and section 6.2 (model).


def _cell_means(df: pd.DataFrame, keys: list[str], outcome: str) -> pd.Series:
    """Mean of a binary ``outcome`` over decodes within each cell of ``keys`` (rows without an outcome,
    e.g. unparseable judgments, are dropped first, so the mean runs over the decodes that have one)."""
    rows = df.dropna(subset=[outcome])
    return rows[outcome].astype(float).groupby([rows[k] for k in keys], sort=True).mean()


def frame_contrasts(
    df: pd.DataFrame, item: str, frame: str, paraphrase: str, outcome: str,
    pairs: Sequence[tuple[str, str]], by: Sequence[str] = (),
) -> pd.DataFrame:
    """Per-item frame contrast (seed 001, section 3), for each group of ``by`` (e.g. model), item and
    frame pair (f1, f2)::

        Delta = 1/2 * sum_r ( mean_d Y[f1, r, d] - mean_d Y[f2, r, d] )

    i.e. the mean over the item's paraphrases r of the decode-averaged difference (the protocol has
    two paraphrases, hence 1/2 * sum). NaN when any of the item's paraphrases lacks f1 or f2.
    Returns columns ``*by, item, f1, f2, delta, n_paraphrases``.
    """
    by = list(by)
    wide = _cell_means(df, [*by, item, paraphrase, frame], outcome).unstack(frame)
    missing = {f for pair in pairs for f in pair} - set(wide.columns)
    if missing:
        raise ValueError(f"frame_contrasts: frames {sorted(missing)} not found in column {frame!r}")
    level = [*by, item]
    out = []
    for f1, f2 in pairs:
        diff = (wide[f1] - wide[f2]).groupby(level=level, sort=True)
        table = pd.DataFrame({"delta": diff.mean(), "n_paraphrases": diff.size(), "_n_ok": diff.count()})
        table.loc[table["_n_ok"] < table["n_paraphrases"], "delta"] = np.nan
        out.append(table.drop(columns="_n_ok").reset_index().assign(f1=f1, f2=f2))
    return pd.concat(out, ignore_index=True)[[*level, "f1", "f2", "delta", "n_paraphrases"]]


def paraphrase_contrasts(
    df: pd.DataFrame, item: str, frame: str, paraphrase: str, outcome: str,
    pairs: Sequence[tuple[str, str]], by: Sequence[str] = (), versions: tuple[str, str] = ("A", "B"),
) -> pd.DataFrame:
    """The paraphrase contrast matched to each frame contrast (``frame_contrasts``), per item::

        Delta_P = 1/2 * sum_{f in (f1, f2)} ( mean_d Y[f, A, d] - mean_d Y[f, B, d] )

    i.e. the 2 x 2 design (frames f1, f2 x paraphrases A, B) of one item read along the other axis:
    both contrasts are a difference of two means of two decode-averaged cells, so they have the same
    scale and, under no effect, the same sampling variance (the like-for-like noise reference).
    NaN when a cell is missing. Returns ``*by, item, f1, f2, delta_p``."""
    by = list(by)
    a, b = versions
    wide = _cell_means(df, [*by, item, frame, paraphrase], outcome).unstack(paraphrase)
    if not {a, b} <= set(wide.columns):
        raise ValueError(f"paraphrase_contrasts: paraphrases {a!r} and {b!r} not both found in column {paraphrase!r}")
    gap = (wide[a] - wide[b]).unstack(frame)
    out = []
    for f1, f2 in pairs:
        if not {f1, f2} <= set(gap.columns):
            raise ValueError(f"paraphrase_contrasts: frames {f1!r}, {f2!r} not both found in column {frame!r}")
        out.append(pd.DataFrame({"delta_p": (gap[f1] + gap[f2]) / 2}).reset_index().assign(f1=f1, f2=f2))
    return pd.concat(out, ignore_index=True)[[*by, item, "f1", "f2", "delta_p"]]


def paraphrase_gaps(
    df: pd.DataFrame, item: str, frame: str, paraphrase: str, outcome: str, by: Sequence[str] = (),
) -> pd.DataFrame:
    """Paraphrase noise per item and frame: |mean_d Y[r=A] - mean_d Y[r=B]| (seed 001, section 3,
    "paraphrase control"), computed as max - min over the cell's paraphrases (= |A - B| for the
    protocol's two). NaN where a cell has fewer than two paraphrases.
    Returns columns ``*by, item, frame, gap, n_paraphrases``."""
    keys = list(dict.fromkeys([*by, item, frame]))
    g = _cell_means(df, [*keys, paraphrase], outcome).groupby(level=keys, sort=True)
    table = pd.DataFrame({"gap": g.max() - g.min(), "n_paraphrases": g.size()})
    table.loc[table["n_paraphrases"] < 2, "gap"] = np.nan
    return table.reset_index()


def paraphrase_noise_band(
    df: pd.DataFrame, item: str, frame: str, paraphrase: str, outcome: str,
    by: Sequence[str] = (), q: float = 0.95,
) -> pd.DataFrame:
    """The band against which frame divergence is judged: the paraphrase gaps of ``paraphrase_gaps``
    pooled over items and frames per group of ``by`` (add the frame column to ``by`` for one band per
    frame), summarised by their mean and their ``q`` quantile (numpy's linear interpolation).
    Cells without a gap (one paraphrase) are left out. Returns ``*by, n_cells, mean_gap, q_gap, q``."""
    if not 0 < q < 1:
        raise ValueError(f"paraphrase_noise_band: q must be in (0, 1), got {q}")
    gaps = paraphrase_gaps(df, item, frame, paraphrase, outcome, by).dropna(subset=["gap"])
    groups = gaps.groupby(list(by), sort=True) if by else [((), gaps)]
    rows = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), "n_cells": len(g), "mean_gap": float(g["gap"].mean()),
                     "q_gap": float(np.quantile(g["gap"], q)), "q": q})
    return pd.DataFrame(rows)


# --- marginal logistic regression (GEE) with item-clustered sandwich SEs ---------------------------


def mean_centre(df: pd.DataFrame, column: str, cluster: str | None = None) -> pd.Series:
    """``column`` minus its sample mean (seed 001, section 6.2: C~_i = C_i - mean(C)).

    With ``cluster`` (e.g. the item), the covariate must be constant within a cluster and the mean
    is taken over clusters, each counted once, so unbalanced designs do not weight items by rows."""
    x = df[column].astype(float)
    if cluster is None:
        return x - x.mean()
    per_cluster = x.groupby(df[cluster])
    if (per_cluster.nunique(dropna=False) > 1).any():
        raise ValueError(f"mean_centre: {column!r} varies within a {cluster!r} cluster")
    return x - per_cluster.first().mean()


_WORKING_CORRELATION = {"independence": sm.cov_struct.Independence, "exchangeable": sm.cov_struct.Exchangeable}


def fit_gee_logit(
    df: pd.DataFrame, formula: str, cluster: str, cov_struct: str = "independence",
    cov_type: str = "bias_reduced",
):
    """Marginal (population-averaged) logistic regression fitted by GEE with clusters ``cluster``
    (seed 001, section 6.2: item-clustered Liang-Zeger SEs), e.g.
    ``y ~ C(frame, Treatment('N')) + C(paraphrase) + c_centred + C(frame):c_centred``.

    ``cov_struct``: working correlation, "independence" (default; the estimates then equal a plain
    logistic GLM's) or "exchangeable". ``cov_type``: "robust" is the Liang-Zeger (1986) sandwich
    A^-1 B A^-1; the default "bias_reduced" is the Mancl-DeRouen (2001) small-sample correction of
    it (residuals inflated by (I - H_ii)^-1), chosen because the pilot has only ~20 item clusters.
    Returns the statsmodels ``GEEResults``; see ``gee_table`` and ``wald_terms``.
    """
    return _fit_gee(df, formula, cluster, sm.families.Binomial(), cov_struct, cov_type, "fit_gee_logit")


def fit_gee_linear(
    df: pd.DataFrame, formula: str, cluster: str, cov_struct: str = "independence",
    cov_type: str = "bias_reduced",
):
    """The same marginal model on the risk-difference scale: identity link and Gaussian variance (the
    linear probability model), fitted by GEE with the same working correlation and covariance options as
    ``fit_gee_logit``. With independence and ``cov_type="robust"`` it is OLS with the cluster-robust (CR0)
    sandwich. Defined where the logit is not: a frame cell with no events, or only events (separation)."""
    return _fit_gee(df, formula, cluster, sm.families.Gaussian(), cov_struct, cov_type, "fit_gee_linear")


def _fit_gee(df, formula, cluster, family, cov_struct, cov_type, name):
    if cov_struct not in _WORKING_CORRELATION:
        raise ValueError(f"{name}: cov_struct must be one of {sorted(_WORKING_CORRELATION)}, got {cov_struct!r}")
    if cov_type not in ("robust", "bias_reduced"):
        raise ValueError(f"{name}: cov_type must be 'robust' or 'bias_reduced', got {cov_type!r}")
    y = formula.split("~")[0].strip()
    if y in df and df[y].dtype == bool:  # patsy would treat a boolean outcome as two categories
        df = df.assign(**{y: df[y].astype(int)})
    model = smf.gee(formula, groups=cluster, data=df, family=family, cov_struct=_WORKING_CORRELATION[cov_struct]())
    return model.fit(cov_type=cov_type, ctol=1e-10, maxiter=100)


def gee_table(result, alpha: float = 0.05, use_t: bool = False) -> pd.DataFrame:
    """Tidy coefficient table of a GEE fit: ``term, estimate, se, stat, dist, df, p, ci_lo, ci_hi,
    n_clusters, cov_type``, from the fit's own covariance (``result.cov_type``).

    ``use_t=False``: Wald z with normal p-values and CIs (``dist="z"``, ``df=inf``);
    ``use_t=True``: the same statistic referred to a t distribution with G - 1 degrees of freedom
    (G = number of clusters), a common further small-sample precaution."""
    n_clusters = int(result.model.num_group)
    est = np.asarray(result.params, dtype=float)
    se = np.sqrt(np.diag(np.asarray(result.cov_params(), dtype=float)))
    ref = sps.t(n_clusters - 1) if use_t else sps.norm()
    stat = est / se
    crit = ref.ppf(1 - alpha / 2)
    return pd.DataFrame({
        "term": list(result.params.index), "estimate": est, "se": se, "stat": stat,
        "dist": "t" if use_t else "z", "df": float(n_clusters - 1) if use_t else np.inf,
        "p": 2 * ref.sf(np.abs(stat)), "ci_lo": est - crit * se, "ci_hi": est + crit * se,
        "n_clusters": n_clusters, "cov_type": result.cov_type,
    })


@dataclass(frozen=True)
class Wald:
    """Joint Wald chi-square test that a set of coefficients are all zero."""

    terms: tuple[str, ...]
    chi2: float
    df: int
    pvalue: float


def wald_terms(result, terms: Sequence[str] | str) -> Wald:
    """Joint Wald test of H0: beta_S = 0 for the coefficients S named in ``terms`` (a list of term
    names, or a regular expression searched in each name, e.g. ``":c_centred"`` for all frame x
    covariate interactions): W = b_S' V_SS^-1 b_S ~ chi2(|S|), with V the fit's own (robust or
    bias-reduced) covariance."""
    names = list(result.params.index)
    chosen = [n for n in names if re.search(terms, n)] if isinstance(terms, str) else list(terms)
    unknown = [t for t in chosen if t not in names]
    if not chosen or unknown:
        raise ValueError(f"wald_terms: no such terms {unknown or terms!r}; the fit has {names}")
    idx = [names.index(t) for t in chosen]
    b = np.asarray(result.params, dtype=float)[idx]
    v = np.asarray(result.cov_params(), dtype=float)[np.ix_(idx, idx)]
    w = float(b @ np.linalg.solve(v, b))
    return Wald(tuple(chosen), w, len(idx), float(sps.chi2.sf(w, len(idx))))


def _holm_adjust(p: np.ndarray) -> np.ndarray:
    """Holm (1979) step-down: the i-th smallest of m p-values times (m - i + 1), made monotone, capped at 1.
    The same numbers as statsmodels' ``multipletests(method="holm")`` (tested against it), written out
    because that function calls ``gc.collect()`` on every call: ~0.5 s each in a process that holds
    models and tables, and a run makes dozens."""
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * np.arange(len(p), 0, -1)))
    out = np.empty(len(p))
    out[order] = adjusted
    return out


def holm(pvalues) -> np.ndarray:
    """Holm (1979) adjusted p-values over one family. NaN p-values stay NaN and do not count towards the
    family size."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = _holm_adjust(p[ok])
    return out


# --- frames study: the confirmatory analysis (linear contrasts, the declared family, the noise test) --


def use_t_reference(n_clusters: int, below: int) -> bool:
    """Whether a Wald statistic is referred to t(G - 1) instead of N(0, 1): when the G clusters are
    fewer than ``below`` (0 = never)."""
    return 0 < n_clusters < below


def linear_contrast(result, weights: dict[str, float], alpha: float = 0.05, use_t: bool = False) -> dict:
    """A linear contrast L'b of one fit's coefficients (``weights``: term name -> weight, every other
    term 0) with SE = sqrt(L' V L) from the fit's own (robust / bias-reduced) covariance V, the Wald
    statistic L'b / SE, its two-sided p and CI, referred to t(G - 1) (G = clusters) when ``use_t``
    else to N(0, 1). Returns ``estimate, se, stat, dist, df, p, ci_lo, ci_hi``."""
    names = list(result.params.index)
    unknown = [t for t in weights if t not in names]
    if unknown or not weights:
        raise ValueError(f"linear_contrast: no such terms {unknown or weights!r}; the fit has {names}")
    L = np.array([float(weights.get(n, 0.0)) for n in names])
    est = float(L @ np.asarray(result.params, dtype=float))
    se = float(np.sqrt(L @ np.asarray(result.cov_params(), dtype=float) @ L))
    g = int(result.model.num_group)
    ref = sps.t(g - 1) if use_t else sps.norm()
    crit = float(ref.ppf(1 - alpha / 2))
    stat = est / se if se > 0 else np.nan
    return {"estimate": est, "se": se, "stat": stat, "dist": "t" if use_t else "z",
            "df": float(g - 1) if use_t else np.inf, "p": float(2 * ref.sf(abs(stat))) if se > 0 else np.nan,
            "ci_lo": est - crit * se, "ci_hi": est + crit * se}


def treatment_contrast(term: str, reference: str, f1: str, f2: str) -> dict[str, float]:
    """Weights of the contrast f1 - f2 on a treatment-coded factor (patsy's ``term[T.level]``
    columns; the reference level has none): beta_f1 - beta_f2 with beta_reference = 0."""
    w: dict[str, float] = {}
    for level, sign in ((f1, 1.0), (f2, -1.0)):
        if level != reference:
            w[f"{term}[T.{level}]"] = w.get(f"{term}[T.{level}]", 0.0) + sign
    if not w:
        raise ValueError(f"treatment_contrast: {f1} - {f2} is the reference against itself")
    return w


def wald_reference(w: Wald, n_clusters: int, use_t: bool) -> tuple[str, float]:
    """The reference distribution of a joint Wald test (``wald_terms``) and its p: chi2(q), or with
    few clusters F(q, G - 1) on W / q (the multivariate analogue of the t(G - 1) rule)."""
    if use_t:
        return f"F({w.df},{n_clusters - 1})", float(sps.f.sf(w.chi2 / w.df, w.df, n_clusters - 1))
    return f"chi2({w.df})", w.pvalue


def holm_family(pvalues) -> np.ndarray:
    """Holm (1979) adjusted p-values over a DECLARED family in which a test that could not be
    computed (NaN p: a failed fit) still counts: it enters as p = 1 (never rejected), so the family
    size is the declared size whatever converges; its adjusted p stays NaN. Otherwise as ``holm``."""
    p = np.asarray(pvalues, dtype=float)
    if p.size == 0:
        raise ValueError("holm_family: the family is empty")
    adj = _holm_adjust(np.where(np.isnan(p), 1.0, p))
    return np.where(np.isnan(p), np.nan, adj)


@dataclass(frozen=True)
class NoiseTest:
    """Frame contrasts against paraphrase contrasts, in mean square (``paraphrase_noise_test``)."""

    frame: float        # mean over items of Delta_F_i^2
    paraphrase: float   # mean over items of Delta_P_i^2
    margin: float       # frame - paraphrase
    lo: float
    hi: float
    pvalue: float
    beyond: bool        # margin > 0 and p < alpha
    n_clusters: int


def _bootstrap_verdict(data, boot, alpha):
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2], axis=-1)
    p = np.minimum(1.0, 2 * np.minimum((boot <= 0).mean(-1), (boot >= 0).mean(-1)))
    return lo, hi, p, (data > 0) & (p < alpha)


def paraphrase_noise_test(frame_delta, paraphrase_delta, clusters, n_boot: int, seed: int,
                          alpha: float = 0.05) -> NoiseTest:
    """Does the frame move items more, in mean square, than rewording does? (``studies/frames/DEFINITIONS.md``.)

    Per item, the frame contrast Delta_F_i (``frame_contrasts``) and the paraphrase contrast Delta_P_i of
    the same frame pair (``paraphrase_contrasts``): two orthogonal contrasts of the same four cells, so with
    independent cells their decode-noise variances are equal whatever the cell probabilities, and
    M = mean_i Delta_F_i^2 - mean_i Delta_P_i^2 has expectation mean_i F_i^2 - mean_i P_i^2 (the true
    contrasts) for every spread of frame and rewording effects over items: decode noise cancels exactly.
    One estimator (the mean of the per-item differences d_i); its SE is the cluster-robust one (``clusters``:
    items sharing a cluster are one unit; sqrt(G/(G-1) sum_g (D_g - M n_g)^2) / N, D_g the cluster's sum of
    d_i), referred to t(G - 1): with one item per cluster it is the one-sample t test of d_i. CI at 1 - alpha,
    two-sided p, ``beyond`` = M > 0 and p < alpha. (The item-bootstrap percentile interval used before this
    t reference reached 5-6.5 % size at the boundary with 19-36 items; the t reference stays at or below 3.5 %.)
    Items where either contrast is NaN are dropped. ``n_boot`` and ``seed`` are unused (kept for callers)."""
    f = np.asarray(frame_delta, dtype=float)
    q = np.asarray(paraphrase_delta, dtype=float)
    c = pd.Series(np.asarray(clusters))
    ok = ~(np.isnan(f) | np.isnan(q))
    if ok.sum() < 2:
        raise ValueError("paraphrase_noise_test: need at least two items with both contrasts")
    codes, _ = pd.factorize(c[ok])
    g = codes.max() + 1
    d = f[ok] ** 2 - q[ok] ** 2
    margin = float(d.mean())
    sums = np.bincount(codes, d, g) - margin * np.bincount(codes, minlength=g)
    se = float(np.sqrt(g / (g - 1) * (sums ** 2).sum()) / len(d)) if g > 1 else np.nan
    crit = sps.t.ppf(1 - alpha / 2, g - 1) if g > 1 else np.nan
    if se > 0:
        p = float(2 * sps.t.sf(abs(margin) / se, g - 1))
    else:
        p = 1.0 if margin == 0 or not np.isfinite(se) else 0.0
    return NoiseTest(float((f[ok] ** 2).mean()), float((q[ok] ** 2).mean()), margin, margin - crit * se,
                     margin + crit * se, p, bool(margin > 0 and p < alpha), int(g))


def decode_noise_variance(cells: pd.DataFrame, item: str, frame: str, paraphrase: str, outcome: str,
                          pairs, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per item (and ``by``) and frame pair: the decode-noise variance of Delta_P_i (= that of Delta_F_i),
    ``noise_var`` = sum over the four cells of s_c^2 / k_c / 4 (s_c^2 the cell's replies' variance, ddof 1;
    k_c its replies; a cell of one reply contributes 0). mean(Delta_P_i^2 - noise_var) is unbiased for
    mean P_i^2, the true rewording swing in mean square (DEFINITIONS.md)."""
    keys = [*by, item, frame, paraphrase]
    v = cells.groupby(keys)[outcome].agg(lambda y: y.var(ddof=1) / len(y) if len(y) > 1 else 0.0).rename("v")
    v = v.reset_index()
    rows = []
    for f1, f2 in pairs:
        s = v[v[frame].isin([f1, f2])].groupby([*by, item])
        got = s["v"].agg(["sum", "size"]).reset_index()
        got = got[got["size"] == 4]
        rows.append(got.assign(f1=f1, f2=f2, noise_var=got["sum"] / 4)[[*by, item, "f1", "f2", "noise_var"]])
    return pd.concat(rows, ignore_index=True)


# the simulation grid of the noise criterion and of the primary contrast (DEFINITIONS.md): frame effects
# (incl. the seed's +11.8 and 3.6 points) and random-sign paraphrase swing SDs, in probability points
FRAME_EFFECTS = (0.0, 0.036, 0.05, 0.1, 0.118, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8)
SWING_SDS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.9)


def simulate_noise_grid(n_items: int, n_decodes: int, frame_effects=FRAME_EFFECTS, swing_sds=SWING_SDS,
                        reps: int = 300, n_boot: int = 0, seed: int = 0, alpha: float = 0.05,
                        family_size: int = 1, base: float = 0.5, item_sd: float = 0.1,
                        frame_share: float = 1.0, swing_share: float = 1.0) -> pd.DataFrame:
    """Size and power of ``paraphrase_noise_test`` and of the primary contrast over a grid of (frame effect,
    paraphrase swing SD), vectorised over cells x ``reps`` replicates. Per item: a base probability
    base + N(0, item_sd); a paraphrase swing s_i ~ N(0, swing_sd), random in sign (A gets +s_i/2, B -s_i/2),
    on the first ``swing_share`` of the items (0 on the others); the frame effect (f1 +effect/2, f2 -effect/2)
    on the first ``frame_share`` of them; probabilities clipped to [0, 1]; each of the four cells is the mean
    of ``n_decodes`` Bernoulli draws; the noise test is ``paraphrase_noise_test``'s t test (one item per
    cluster; ``n_boot`` unused). Per cell: the TRUE mean F_i^2 and P_i^2 (from the clipped probabilities; ``true_rms_*`` their
    roots), the observed means, ``null`` = true mean F^2 <= true mean P^2, ``rate_beyond`` (the noise
    criterion's verdict), ``rate_significant`` (the primary contrast alone: the item-level t test of mean
    Delta_F at alpha / ``family_size``, Holm's strictest step; a stand-in for the GEE Wald test) and
    ``rate_detect`` = both."""
    for name, share in (("frame_share", frame_share), ("swing_share", swing_share)):
        if not 0 < share <= 1:
            raise ValueError(f"simulate_noise_grid: {name} must be in (0, 1], got {share}")
    rng = np.random.default_rng(seed)
    fe, sd = np.meshgrid(np.asarray(frame_effects, float), np.asarray(swing_sds, float), indexing="ij")
    fe, sd = fe.ravel()[:, None, None], sd.ravel()[:, None, None]
    shape = (fe.shape[0], reps, n_items)
    on_f = (np.arange(n_items) < max(1, round(frame_share * n_items))).astype(float)
    on_s = (np.arange(n_items) < max(1, round(swing_share * n_items))).astype(float)
    item = base + rng.normal(0, item_sd, shape)
    swing = sd * rng.standard_normal(shape) * on_s
    prob = {(a, b): np.clip(item + a * fe * on_f / 2 + b * swing / 2, 0, 1) for a in (1, -1) for b in (1, -1)}
    y = {k: rng.binomial(n_decodes, v) / n_decodes for k, v in prob.items()}

    def axes(c):  # (frame contrast, paraphrase contrast) of four cells
        return ((c[1, 1] - c[-1, 1] + c[1, -1] - c[-1, -1]) / 2, (c[1, 1] - c[1, -1] + c[-1, 1] - c[-1, -1]) / 2)

    true_f, true_p = axes(prob)
    obs_f, obs_p = axes(y)
    d = obs_f ** 2 - obs_p ** 2
    sd_d = d.std(-1, ddof=1)
    t_d = np.divide(d.mean(-1) * np.sqrt(n_items), sd_d, out=np.zeros_like(sd_d), where=sd_d > 0)
    beyond = (t_d > 0) & (2 * sps.t.sf(np.abs(t_d), n_items - 1) < alpha)
    sd_f = obs_f.std(-1, ddof=1)
    t = np.divide(obs_f.mean(-1) * np.sqrt(n_items), sd_f, out=np.zeros_like(sd_f), where=sd_f > 0)
    significant = 2 * sps.t.sf(np.abs(t), n_items - 1) < alpha / family_size
    out = pd.DataFrame({"n_items": n_items, "n_decodes": n_decodes, "frame_share": frame_share, "swing_share": swing_share,
                        "frame_effect": fe.ravel(), "swing_sd": sd.ravel(),
                        "true_ms_frame": (true_f ** 2).mean((1, 2)), "true_ms_swing": (true_p ** 2).mean((1, 2)),
                        "ms_df": (obs_f ** 2).mean((1, 2)), "ms_dp": (obs_p ** 2).mean((1, 2)),
                        "rate_beyond": beyond.mean(1), "rate_significant": significant.mean(1),
                        "rate_detect": (beyond & significant).mean(1),
                        "family_size": family_size, "reps": reps})
    out["true_rms_frame"], out["true_rms_swing"] = np.sqrt(out["true_ms_frame"]), np.sqrt(out["true_ms_swing"])
    out["null"] = out["true_ms_frame"] <= out["true_ms_swing"] + 1e-12
    return out


def swing_column(grid: pd.DataFrame, rms_swing: float) -> float:
    """The smallest swing SD of ``grid`` at or above ``rms_swing`` (the run's rewording swing, root mean
    square net of decode noise); the largest SD when none is (so the MDE read there errs large)."""
    sds = np.sort(grid["swing_sd"].unique())
    above = sds[sds >= rms_swing - 1e-9]
    return float(above[0] if len(above) else sds[-1])


def min_detectable(grid: pd.DataFrame, swing_sd: float, power: float = 0.8, rate: str = "rate_detect") -> float:
    """The smallest frame effect at which ``rate`` reaches ``power`` in the grid's column ``swing_sd``,
    linearly interpolated between grid points; NaN when no effect of the grid reaches it."""
    col = grid[np.isclose(grid["swing_sd"], swing_sd)].sort_values("frame_effect")
    x, r = col["frame_effect"].to_numpy(), col[rate].to_numpy()
    above = np.flatnonzero(r >= power)
    if not len(above):
        return float("nan")
    k = above[0]
    if k == 0 or r[k] == r[k - 1]:
        return float(x[k])
    return float(x[k - 1] + (power - r[k - 1]) * (x[k] - x[k - 1]) / (r[k] - r[k - 1]))


def reversals(item_delta: pd.DataFrame, by: Sequence[str], delta: str = "delta", pa: str = "delta_a",
              pb: str = "delta_b") -> pd.DataFrame:
    """Per group of ``by``: items whose Delta has the sign opposite to the group's mean Delta
    (``n_reversed``; zeros count as neither), and items whose Delta under paraphrase A and under B
    have opposite signs (``n_paraphrase_flips``), out of ``n_items``."""
    rows = []
    for key, g in item_delta.dropna(subset=[delta]).groupby(list(by), sort=True):
        sign = np.sign(g[delta].mean())
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,))), "n_items": len(g),
                     "mean_delta": float(g[delta].mean()),
                     "n_reversed": int((np.sign(g[delta]) == -sign).sum()) if sign != 0 else 0,
                     "n_paraphrase_flips": int((np.sign(g[pa]) * np.sign(g[pb]) < 0).sum())})
    return pd.DataFrame(rows)


# --- policy study: exchangeability rank test, label-supervision range and seed floor -------------
# Source: Jebraeeli et al., "Policy Is Not Capability" (data/published/README.md), "可交换性秩检验" and "种子下限 Phi_b".


@dataclass(frozen=True)
class RankTest:
    """Exchangeability rank test of k designated arms among n."""

    n: int
    k: int
    rank_sum: float
    pvalue: float


def _k_subset_sum_counts(values: Sequence[int], k: int) -> Counter:
    """Number of k-subsets of ``values`` with each possible sum (exact, by dynamic programming)."""
    counts = [Counter() for _ in range(k + 1)]
    counts[0][0] = 1
    for v in values:
        for j in range(k, 0, -1):
            for s, c in list(counts[j - 1].items()):
                counts[j][s + v] += c
    return counts[k]


def exchangeability_rank_test(scores: pd.Series, designated: Iterable, alternative: str = "greater") -> RankTest:
    """Exchangeability rank test (seed 003): under H0 the arms' ranks on a benchmark do not depend on
    whether policy A is an arm's last supervision signal, so every k-subset of the n ranks is equally
    likely to be the designated arms'. The seed's p = 1/C(n, k) is the chance that the designated
    arms take the k most extreme ranks; this generalises it to

        p = #{k-subsets of ranks with rank sum at least as extreme as observed} / C(n, k),

    which equals 1/C(n, k) when they take the top k (k=4 of 10: 0.00476; k=5: 0.00397).
    ``scores``: one score per arm, indexed by arm. Ties get mid-ranks (rank n = highest score).
    ``alternative``: "greater" (designated score high), "less", or "two-sided" (distance of the rank
    sum from its null mean k(n+1)/2)."""
    scores = pd.Series(scores, dtype=float)
    designated = list(designated)
    n, k = len(scores), len(designated)
    if scores.isna().any() or not scores.index.is_unique:
        raise ValueError("exchangeability_rank_test: need one non-missing score per arm")
    if not set(designated) <= set(scores.index) or len(set(designated)) != k or not 0 < k < n:
        raise ValueError(f"exchangeability_rank_test: need 0 < k < n distinct designated arms among {list(scores.index)}")
    twice = np.rint(2 * sps.rankdata(scores.to_numpy())).astype(int)  # mid-ranks are multiples of 1/2
    observed = int(twice[[scores.index.get_loc(a) for a in designated]].sum())
    centre = k * (n + 1)  # twice the null mean of the rank sum
    extreme = {
        "greater": lambda s: s >= observed,
        "less": lambda s: s <= observed,
        "two-sided": lambda s: abs(s - centre) >= abs(observed - centre),
    }
    if alternative not in extreme:
        raise ValueError(f"exchangeability_rank_test: alternative must be one of {sorted(extreme)}, got {alternative!r}")
    counts = _k_subset_sum_counts(twice.tolist(), k)
    hits = sum(c for s, c in counts.items() if extreme[alternative](s))
    return RankTest(n, k, observed / 2, hits / math.comb(n, k))


def score_range(df: pd.DataFrame, by: Sequence[str], score: str) -> pd.DataFrame:
    """max - min of ``score`` within each group of ``by``: ``*by, n, min, max, range``."""
    if df[score].isna().any():
        raise ValueError(f"score_range: {score!r} has missing values")
    g = df.groupby(list(by), sort=True)[score]
    return pd.DataFrame({"n": g.size(), "min": g.min(), "max": g.max(), "range": g.max() - g.min()}).reset_index()


def label_supervision_range(arm_scores: pd.DataFrame, benchmark: str, score: str) -> pd.DataFrame:
    """Label-supervision range Delta_b (seed 003, eq. 1): max - min of a benchmark's score across all
    arm models (the seed takes it across the 10 arms at both scales; pass one row per model).
    Returns ``benchmark, n_models, delta``."""
    r = score_range(arm_scores, [benchmark], score)
    return r.rename(columns={"n": "n_models", "range": "delta"})[[benchmark, "n_models", "delta"]]


def seed_floor(seed_scores: pd.DataFrame, benchmark: str, recipe: str, score: str) -> pd.DataFrame:
    """Seed floor Phi_b (seed 003): the range (max - min) of a benchmark's score across seeds of one
    recipe (same configuration, different seeds). With several recipes, the seed reports the spread
    of these per-recipe ranges (e.g. 0-71, median 4); we report min, median and max and take
    ``phi`` = the largest per-recipe range, the conservative floor (a ranking gap must exceed the
    worst seed noise seen). Recipes with fewer than two seeds carry no floor and are left out.
    Returns ``benchmark, n_recipes, phi_min, phi_median, phi_max, phi``."""
    per_recipe = score_range(seed_scores, [benchmark, recipe], score)
    per_recipe = per_recipe[per_recipe["n"] >= 2]
    if per_recipe.empty:
        raise ValueError("seed_floor: no recipe has two or more seeds")
    g = per_recipe.groupby(benchmark, sort=True)["range"]
    out = pd.DataFrame({"n_recipes": g.size(), "phi_min": g.min(), "phi_median": g.median(), "phi_max": g.max()})
    return out.assign(phi=out["phi_max"]).reset_index()


def range_floor_ratio(delta, phi) -> np.ndarray:
    """Delta_b / Phi_b (seed 003's definition sensitivity), with an explicit rule at a zero floor:
    Phi > 0 -> Delta/Phi; Phi = 0 and Delta > 0 -> inf; Phi = 0 and Delta = 0 -> NaN (undefined);
    NaN in either -> NaN. Negative inputs are an error (both are ranges)."""
    delta = np.asarray(delta, dtype=float)
    phi = np.asarray(phi, dtype=float)
    if (delta < 0).any() or (phi < 0).any():
        raise ValueError("range_floor_ratio: ranges cannot be negative")
    safe = np.where(phi > 0, phi, 1.0)
    ratio = np.where(phi > 0, delta / safe, np.where(delta > 0, np.inf, np.nan))
    return np.where(np.isnan(delta) | np.isnan(phi), np.nan, ratio)


def definition_sensitivity(
    arm_scores: pd.DataFrame, seed_scores: pd.DataFrame, benchmark: str, recipe: str, score: str,
) -> pd.DataFrame:
    """Per benchmark: Delta_b (``label_supervision_range``), the seed floor (``seed_floor``) and
    ``ratio`` = Delta_b / Phi_b (``range_floor_ratio``). Both tables must use the same score units.
    Benchmarks without a floor get NaN."""
    table = label_supervision_range(arm_scores, benchmark, score).merge(
        seed_floor(seed_scores, benchmark, recipe, score), on=benchmark, how="left")
    return table.assign(ratio=range_floor_ratio(table["delta"], table["phi"]))


# --- cluster bootstrap --------------------------------------------------------------------------


def _cluster_draws(n_clusters: int, n_boot: int, seed: int) -> np.ndarray:
    """``n_boot`` x ``n_clusters`` matrix of cluster indices drawn with replacement under ``seed``."""
    if n_boot <= 0 or n_clusters <= 0:
        raise ValueError(f"cluster bootstrap: need n_boot > 0 and clusters, got {n_boot} and {n_clusters}")
    return np.random.default_rng(seed).integers(0, n_clusters, size=(n_boot, n_clusters))


def cluster_bootstrap_ci(
    df: pd.DataFrame, cluster: str, statistic: Callable[[pd.DataFrame], float],
    n_boot: int, seed: int, alpha: float = 0.05,
) -> tuple[float, float, float]:
    """Percentile bootstrap CI of ``statistic(df)`` resampling whole clusters (e.g. items or
    intents) with replacement. In each resample a drawn cluster's copy gets a fresh integer id in
    ``cluster``, so statistics that group by the cluster see repeated draws as distinct clusters.
    Returns (statistic on the data, lo, hi); reproducible under ``seed``."""
    groups = list(df.groupby(cluster, sort=True).indices.values())
    boot = np.empty(n_boot)
    for b, draw in enumerate(_cluster_draws(len(groups), n_boot, seed)):
        idx = np.concatenate([groups[j] for j in draw])
        ids = np.repeat(np.arange(len(draw)), [len(groups[j]) for j in draw])
        boot[b] = statistic(df.iloc[idx].assign(**{cluster: ids}))
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return float(statistic(df)), float(lo), float(hi)


def cluster_bootstrap_mean(
    df: pd.DataFrame, cluster: str, value: str, n_boot: int, seed: int, alpha: float = 0.05,
) -> tuple[float, float, float]:
    """``cluster_bootstrap_ci`` of the row mean of ``value``, vectorised (the resampled mean is the
    drawn clusters' summed values over their summed row counts); the same draws under the same seed."""
    g = df[value].astype(float).groupby(df[cluster], sort=True)
    sums, counts = g.sum().to_numpy(), g.size().to_numpy()
    draw = _cluster_draws(len(sums), n_boot, seed)
    boot = sums[draw].sum(axis=1) / counts[draw].sum(axis=1)
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
    return float(df[value].astype(float).mean()), float(lo), float(hi)


# --- rank correlation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Spearman:
    """Spearman's rank correlation of two paired samples."""

    rho: float
    pvalue: float
    n: int


def spearman(x, y) -> Spearman:
    """Spearman's rho (Pearson correlation of the mid-ranks; ties share their mean rank) with the
    two-sided p-value of t = rho * sqrt((n - 2) / (1 - rho^2)) on n - 2 degrees of freedom (scipy's
    ``spearmanr``; an approximation at small n). Pairs with a missing value are dropped. NaN rho
    and p when fewer than three pairs remain or either sample is constant (rho is undefined there:
    no division by zero)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"spearman: need two paired 1-D samples, got shapes {x.shape} and {y.shape}")
    ok = ~(np.isnan(x) | np.isnan(y))
    x, y = x[ok], y[ok]
    n = len(x)
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Spearman(float("nan"), float("nan"), n)
    res = sps.spearmanr(x, y)
    return Spearman(float(res.statistic), float(res.pvalue), n)


# --- policy study: where a guard sits between two policies (seed 003) ---------------

# the four item classes of two binary labellings A and B, in the order the position functions use
POLICY_CLASSES = ("both_safe", "both_unsafe", "a_stricter", "b_stricter")
VERDICT_CODES = ("A", "B", "mixed", "undetermined", "inconsistent")
# why a verdict is what it is (``policy_verdict``'s reason codes)
REASONS = ("sides", "opposite sides", "missing evidence", "no position", "too few", "unclear", "outside both policies")


def policy_class(unsafe_a, unsafe_b) -> np.ndarray:
    """The index in ``POLICY_CLASSES`` of every item: both safe, both unsafe, A stricter (A unsafe, B
    safe), B stricter (A safe, B unsafe)."""
    a, b = np.asarray(unsafe_a, dtype=bool), np.asarray(unsafe_b, dtype=bool)
    return np.select([~a & ~b, a & b, a & ~b], [0, 1, 2], 3)


def jeffreys_draws(k, n, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """Draws of each stratum's flag rate from its Jeffreys posterior Beta(k + 1/2, n - k + 1/2)
    (``..., n_draws, K`` from counts ``k`` (..., K) of ``n`` (K,)): unlike a bootstrap, it has spread
    when a stratum is flagged 0 or n times; its quantiles are the Jeffreys interval
    (``statsmodels.stats.proportion.proportion_confint(method="jeffreys")``). NaN where n = 0."""
    k = np.asarray(k, dtype=np.float32)
    n = np.broadcast_to(np.asarray(n, dtype=np.float32), k.shape)
    shape = (*k.shape[:-1], n_draws, k.shape[-1])
    g1 = rng.standard_gamma(np.broadcast_to((k + 0.5)[..., None, :], shape), dtype=np.float32)
    g2 = rng.standard_gamma(np.broadcast_to((n - k + 0.5)[..., None, :], shape), dtype=np.float32)
    g1 /= g1 + g2
    return np.where(n[..., None, :] > 0, g1, np.float32(np.nan))


def group_positions(r, n, cls, grp, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(stratum positions (..., K), separations (..., G)) from flag rates ``r`` (..., K) of K strata
    of ``n`` answered items, stratum j of class ``cls[j]`` (``POLICY_CLASSES``) in group ``grp[j]`` (a
    dataset and format). With s_g and u_g the rates on group g's items both policies call safe and
    unsafe (separation u_g - s_g; a class's strata pooled by their items), a disputed stratum's
    position is where its rate f lies between its own group's s_g and u_g, oriented toward A:
    (f - s_g) / (u_g - s_g) A stricter, (u_g - f) / (u_g - s_g) B stricter; NaN for a baseline
    stratum, where u_g = s_g or a class is empty."""
    r = np.asarray(r)
    n, cls, grp = np.asarray(n, dtype=r.dtype), np.asarray(cls), np.asarray(grp)
    member = (grp[:, None] == np.arange(n_groups)[None, :])
    with np.errstate(invalid="ignore", divide="ignore"):
        base = []
        for c in (0, 1):
            w = (member * ((cls == c) * n)[:, None]).astype(r.dtype)  # K x G
            base.append(np.nan_to_num(r) @ w / w.sum(axis=0))  # empty class -> NaN
        s, u = base
        sep = u - s
        denom = np.where(sep == 0, np.nan, sep)
        sj, uj, dj = s[..., grp], u[..., grp], denom[..., grp]
        pos = np.where(cls == 2, (r - sj) / dj, np.where(cls == 3, (uj - r) / dj, np.nan))
    return pos, sep


def direction_positions(pos, n, cls, use=True) -> np.ndarray:
    """The position of each direction (..., 2: A stricter, B stricter): the item-weighted mean of
    the positions ``pos`` (..., K) of its strata with a position and ``use`` (broadcast to ``pos``:
    the strata of the groups that give positions); NaN where none."""
    pos = np.asarray(pos)
    n, cls = np.asarray(n, dtype=pos.dtype), np.asarray(cls)
    out = []
    for c in (2, 3):
        w = np.where(np.isnan(pos) | ~np.asarray(use, dtype=bool), pos.dtype.type(0), (cls == c) * n)
        tot = w.sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out.append(np.where(tot > 0, np.nansum(pos * w, axis=-1) / np.where(tot > 0, tot, 1), np.nan))
    return np.stack(out, axis=-1)


def matched_positions(r, n, cls, grp, lev, pair, n_groups: int, n_levels: int,
                      n_pairs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair positions (..., P), within-level separations (..., G), matched answered items per pair (P,))
    from flag rates ``r`` (..., K) of K strata of ``n`` answered items, stratum j of class ``cls[j]``
    (``POLICY_CLASSES``) in group ``grp[j]`` (a dataset and format) and lexical level ``lev[j]``, a
    disputed stratum part of rule pair ``pair[j]`` (-1 for a baseline stratum). A **cell** is a group at
    one level; s_c and u_c are the rates on its items both policies call safe and unsafe (a cell with
    both is matched). A pair's position is read against the cells of its own items, weighted by its
    items there: sum_l n_l (f_l - s_l) / sum_l n_l (u_l - s_l) A stricter, sum_l n_l (u_l - f_l) /
    sum_l n_l (u_l - s_l) B stricter, over its matched cells (its items in an unmatched cell have no
    baseline and are left out); NaN where that denominator is 0. A group's separation is the mean of
    u_c - s_c over its matched cells, weighted by n_s n_u / (n_s + n_u); NaN with no matched cell. With
    one level it is ``group_positions`` (each pair read against its group's u_g - s_g)."""
    r = np.asarray(r)
    dt = r.dtype
    n = np.asarray(n, dtype=dt)
    cls, grp, lev, pair = (np.asarray(x) for x in (cls, grp, lev, pair))
    n_cells = n_groups * n_levels
    cell = grp * n_levels + lev
    one_cell = cell[:, None] == np.arange(n_cells)[None, :]  # K x C
    rz = np.nan_to_num(r)
    with np.errstate(invalid="ignore", divide="ignore"):
        ws, wu = ((one_cell * ((cls == c) * n)[:, None]).astype(dt) for c in (0, 1))
        ns, nu = ws.sum(axis=0), wu.sum(axis=0)
        s, u = rz @ ws / ns, rz @ wu / nu  # empty class -> NaN
        matched = (ns > 0) & (nu > 0)
        h = np.where(matched, ns * nu / np.where(matched, ns + nu, 1), 0).astype(dt)
        member = (np.arange(n_cells)[:, None] // n_levels) == np.arange(n_groups)[None, :]  # C x G
        hw = (member * h[:, None]).astype(dt)
        sep = np.where(hw.sum(axis=0) > 0, np.nan_to_num(u - s) @ hw / hw.sum(axis=0), np.nan)
        use = matched[cell] & (cls >= 2) & (n > 0)  # disputed strata with a matched baseline
        sk, uk = s[..., cell], u[..., cell]
        num = np.where(use, np.where(cls == 2, r - sk, uk - r) * n, 0)
        den = np.where(use, (uk - sk) * n, 0)
        one_pair = ((pair[:, None] == np.arange(n_pairs)[None, :]) & use[:, None]).astype(dt)  # K x P
        num_p, den_p = np.nan_to_num(num) @ one_pair, np.nan_to_num(den) @ one_pair
        pos = np.where(den_p != 0, num_p / np.where(den_p != 0, den_p, 1), np.nan)
    return pos, sep, n @ one_pair


@dataclass(frozen=True)
class PolicyVerdict:
    """``policy_verdict`` for D guards (or draws) at once: arrays with a leading axis D."""

    position: np.ndarray       # D x 2 (A stricter, B stricter), toward A
    lo: np.ndarray             # D x 2, Jeffreys-posterior interval
    hi: np.ndarray
    side: np.ndarray           # D x 2: 1 sides with A, -1 with B, 0 neither
    pair_position: np.ndarray  # D x P (the rule pairs: ``pair``)
    pair_lo: np.ndarray
    pair_hi: np.ndarray
    pair_side: np.ndarray      # D x P
    separation: np.ndarray     # D x G: within-level u - s (``matched_positions``)
    separation_lo: np.ndarray
    placed: np.ndarray         # D x G: the group gives positions
    verdict: np.ndarray        # D: index into VERDICT_CODES
    reason: np.ndarray         # D: index into REASONS
    pair_n: np.ndarray         # P: answered items of each pair with a matched baseline
    pair_outside: np.ndarray   # D x P: the pair's interval lies wholly beyond the both-unsafe side (``policy_verdict``)
    outside: np.ndarray        # D x 2: the direction's likewise


def policy_verdict(k, n, cls, grp, n_items, n_draws: int, alpha: float, margin: float, min_items: int,
                   min_separation: float, rng: np.random.Generator, lev=None, pair=None,
                   outside: float = np.inf) -> PolicyVerdict:
    """Which policy a classifier follows, from its flagged counts ``k`` (D x K: D guards or simulated
    draws) on K strata of ``n`` answered items of class ``cls`` in group ``grp`` and lexical level
    ``lev`` (default 0), a disputed stratum part of rule pair ``pair`` (default: each disputed stratum
    its own pair) (``matched_positions``); ``n_items`` (K): the items of each stratum the classifier was
    asked to score.

    Intervals: quantiles at ``alpha`` of ``n_draws`` joint draws of the strata's rates from their
    Jeffreys posteriors (``jeffreys_draws``). A group **gives positions** when both its baseline
    classes have ``min_items`` answered items and the lower bound of its within-level separation
    exceeds ``min_separation``; otherwise its disputed pairs take no side. A rule pair with
    ``min_items`` answered items with a matched baseline, and a direction with ``min_items`` such items
    in groups that give positions, **side with A** when the interval of their position lies above 0.5 +
    ``margin``, with B below 0.5 - ``margin``; they are **outside both policies** when the guard flags
    those disputed items more than its own both-unsafe items by more than ``outside`` of its separation:
    the interval wholly above 1 + ``outside`` A stricter, below -``outside`` B stricter (flagging them less
    than the both-safe items is what a policy that calls them plainly safe predicts, not an
    inconsistency). The verdict, in this order: ``undetermined`` (missing
    evidence) when a direction, or a baseline class of a group with disputed items, has items but none
    answered; ``inconsistent`` when a direction or rule pair is outside both policies; ``mixed`` when
    any direction or rule pair sides with A and another with B; ``undetermined`` (no position) when a
    direction with items has no group that gives positions; ``A`` (``B``) when every direction with
    items sides with A (B) (intersection-union: valid at alpha without correction); otherwise
    ``undetermined`` (too few, or unclear). The rule is symmetric in the names A and B."""
    k = np.atleast_2d(np.asarray(k, dtype=float))
    n, cls, grp = np.asarray(n), np.asarray(cls), np.asarray(grp)
    n_items = np.asarray(n_items)
    lev = np.zeros(len(cls), dtype=int) if lev is None else np.asarray(lev)
    if pair is None:
        pair = np.where(cls >= 2, np.cumsum(cls >= 2) - 1, -1)
    pair = np.asarray(pair)
    d, n_groups, n_levels, n_pairs = k.shape[0], int(grp.max()) + 1, int(lev.max()) + 1, int(pair.max()) + 1
    first = np.array([np.flatnonzero(pair == p)[0] for p in range(n_pairs)], dtype=int)
    pcls, pgrp = cls[first], grp[first]
    r = np.divide(k, n, out=np.full_like(k, np.nan), where=n > 0)
    args = (cls, grp, lev, pair, n_groups, n_levels, n_pairs)
    pos, sep, pn = matched_positions(r, n, *args)
    bpos, bsep, _ = matched_positions(jeffreys_draws(k, n, n_draws, rng), n, *args)
    q = [alpha / 2, 1 - alpha / 2]
    # an empty group separates nothing
    sep_lo = np.quantile(np.nan_to_num(bsep, nan=-1.0), alpha / 2, axis=1)
    member = grp[:, None] == np.arange(n_groups)[None, :]
    base_n = [n @ (member * (cls == c)[:, None]) for c in (0, 1)]  # answered per group and baseline class
    placed = (sep_lo > min_separation) & (np.minimum(*base_n) >= min_items)[None, :]
    use = placed[:, pgrp]  # D x P: the pairs of the groups that give positions
    dpos = direction_positions(pos, pn, pcls, use)
    bdpos = direction_positions(bpos, pn, pcls, use[:, None, :])
    # a draw without a position (u = s in that draw) sits halfway
    plo, phi = np.quantile(np.where(np.isnan(bpos), 0.5, bpos), q, axis=1)
    dlo, dhi = np.quantile(np.where(np.isnan(bdpos), 0.5, bdpos), q, axis=1)
    dlo, dhi = np.where(np.isnan(dpos), np.nan, dlo), np.where(np.isnan(dpos), np.nan, dhi)
    pair_ok = use & (pn >= min_items)[None, :]
    pair_side = np.where(pair_ok, np.where(plo > 0.5 + margin, 1, np.where(phi < 0.5 - margin, -1, 0)), 0)
    pair_out = pair_ok & np.where(pcls == 2, plo > 1 + outside, phi < -outside)
    dir_n = np.stack([(use * ((pcls == c) * pn)[None, :]).sum(axis=1) for c in (2, 3)], axis=1)
    present = np.array([(n_items[cls == c] > 0).any() for c in (2, 3)])
    dir_ok = (dir_n >= min_items) & present[None, :]
    side = np.where(dir_ok, np.where(dlo > 0.5 + margin, 1, np.where(dhi < 0.5 - margin, -1, 0)), 0)
    dir_out = dir_ok & np.where(np.array([True, False])[None, :], dlo > 1 + outside, dhi < -outside)
    answered_dir = np.array([n[cls == c].sum() for c in (2, 3)])
    disputed_groups = np.unique(grp[(cls >= 2) & (n_items > 0)])
    base_items = [n_items @ (member * (cls == c)[:, None]) for c in (0, 1)]
    missing = bool((present & (answered_dir == 0)).any()) or any(
        bool(((base_items[c][disputed_groups] > 0) & (base_n[c][disputed_groups] == 0)).any()) for c in (0, 1))
    any_a = (side == 1).any(axis=1) | (pair_side == 1).any(axis=1)
    any_b = (side == -1).any(axis=1) | (pair_side == -1).any(axis=1)
    out = dir_out.any(axis=1) | pair_out.any(axis=1)
    unplaced = ((dir_n == 0) & present[None, :]).any(axis=1)
    all_a = (side[:, present] == 1).all(axis=1) & present.any()
    all_b = (side[:, present] == -1).all(axis=1) & present.any()
    few = ((dir_n < min_items) & present[None, :]).any(axis=1) | (not present.any())
    miss = np.full(d, missing)
    verdict = np.select([miss, out, any_a & any_b, unplaced, all_a, all_b], [3, 4, 2, 3, 0, 1], 3)
    reason = np.select([miss, out, any_a & any_b, unplaced, all_a | all_b, few], [2, 6, 1, 3, 0, 4], 5)
    return PolicyVerdict(dpos, dlo, dhi, side, pos, plo, phi, pair_side, sep, sep_lo, placed, verdict, reason, pn,
                         pair_out, dir_out)


# --- kv study: the reference judge holding (a paired non-inferiority test) ---------------


def paired_noninferiority_pvalues(b, c, n, margin: float) -> np.ndarray:
    """One-sided p of H0 "p10 - p01 >= margin" against "below it" for matched binary pairs: b pairs read
    (1, 0), c pairs (0, 1) among n (the kv study: a judge's refusal under full and not under the arm, and
    the reverse; p10 - p01 is its refusal drop). Tango's (1998) score test: z = (b - c - n margin) /
    sqrt(n (2 q01 + margin (1 - margin))), q01 the maximum-likelihood p01 under H0's boundary; p = Phi(z).
    At margin 0 it is McNemar's uncorrected z. Vectorised over arrays of b, c (and n)."""
    if not 0 < margin < 1:
        raise ValueError(f"paired_noninferiority_pvalues: margin must be in (0, 1), got {margin}")
    b, c, n = (np.asarray(x, dtype=float) for x in (b, c, n))
    A = 2 * n
    B = -b - c + (2 * n - b + c) * margin
    C = -c * margin * (1 - margin)
    q01 = (np.sqrt(B ** 2 - 4 * A * C) - B) / (2 * A)
    z = (b - c - n * margin) / np.sqrt(n * (2 * q01 + margin * (1 - margin)))
    return sps.norm.cdf(z)
