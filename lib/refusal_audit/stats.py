"""Statistics used by every study, each implemented once (pure numpy / scipy / statsmodels).

Each function is tested against an independent computation in tests/test_stats.py.
"""
from __future__ import annotations

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
from statsmodels.stats.multitest import multipletests
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


# --- frames study: per-item frame contrasts and the paraphrase-noise band -------------------------
# Source: shared/seeds/001 (evaluation-context divergence), section 3 (estimand) and section 6.2 (model).


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
    if cov_struct not in _WORKING_CORRELATION:
        raise ValueError(f"fit_gee_logit: cov_struct must be one of {sorted(_WORKING_CORRELATION)}, got {cov_struct!r}")
    if cov_type not in ("robust", "bias_reduced"):
        raise ValueError(f"fit_gee_logit: cov_type must be 'robust' or 'bias_reduced', got {cov_type!r}")
    y = formula.split("~")[0].strip()
    if y in df and df[y].dtype == bool:  # patsy would treat a boolean outcome as two categories
        df = df.assign(**{y: df[y].astype(int)})
    model = smf.gee(formula, groups=cluster, data=df, family=sm.families.Binomial(),
                    cov_struct=_WORKING_CORRELATION[cov_struct]())
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


def holm(pvalues) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values over one family (statsmodels ``multipletests``,
    ``method="holm"``). NaN p-values stay NaN and do not count towards the family size."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = multipletests(p[ok], method="holm")[1]
    return out


# --- policy study: exchangeability rank test, label-supervision range and seed floor -------------
# Source: shared/seeds/003 (policy is not capability), "可交换性秩检验" and "种子下限 Phi_b".


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
