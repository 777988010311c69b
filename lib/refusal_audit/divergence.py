"""Item-level readings of a within-item contrast beyond its mean: do items move in BOTH directions beyond
rewording noise, how many items carry a directional effect, and does the effect depend on decoding?

Each reading is one test on per-item contrasts of a 2 (conditions) x 2 (rewordings) design per item (the
condition contrast Delta_F_i and the rewording contrast Delta_P_i of the same four cells, as in
``stats.paraphrase_noise_test``), with item clusters. Every function here is vectorised over leading axes
(one table, or many simulated tables at once), so the run and its calibration (``simulate_shapes``) compute
the same statistic with the same code. Definitions and the calibration table: the frames study's
DEFINITIONS.md, "Item-level readings".

* ``signed_excess``: the frame moves items UP beyond rewording noise, and DOWN beyond it. Per item
  u_i = max(Delta_F_i, 0)^2 - Delta_P_i^2 / 2 (and d_i with min). If no item's true contrast is below zero,
  max(-(F_i + e), 0) <= max(-e, 0) pointwise, so E[d_i] <= E[e^2] / 2 - E[Delta_P_i^2] / 2 <= 0 when the decode
  error e is symmetric and has the variance of Delta_P_i's (two orthogonal contrasts of the same four cells);
  the true rewording swing only makes it more negative. Each is a one-sided cluster-robust t test; "both
  directions" is their intersection-union test (p = the larger p, level alpha without correction).
* ``effective_share``: s = (mean F)^2 / mean F^2 in [0, 1], the share of items that would carry the mean
  effect if the carriers moved equally (1: every item moves alike; k / n: k items carry it). Numerator
  (mean Delta_F)^2 - mean(v_i) / n and denominator mean(Delta_F^2 - v_i) (v_i the decode-noise variance of Delta_F_i,
  ``stats.decode_noise_variance``) are unbiased for their true values; delta-method cluster SE; the declared
  test is H0: s >= ``share_margin`` (the effect is carried by at least that share of items) against s below it.
* ``decode_dependence``: the per-item contrast on sampled decodes minus that on greedy decodes, mean over
  items, two-sided cluster t test (frame x greedy/sampled).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


def _codes(clusters, n: int) -> tuple[np.ndarray, int]:
    if clusters is None:
        return np.arange(n), n
    codes = np.unique(np.asarray(clusters), return_inverse=True)[1].ravel()
    return codes, int(codes.max()) + 1


def cluster_mean_t(x: np.ndarray, clusters=None) -> tuple[np.ndarray, np.ndarray, int]:
    """(mean over the last axis, its cluster-robust SE, degrees of freedom G - 1): the SE of
    ``stats.paraphrase_noise_test`` (sqrt(G / (G - 1) sum_g (S_g - mean n_g)^2) / N; with one item per cluster
    the one-sample t test's), vectorised over leading axes. NaN items are not allowed (drop them first)."""
    x = np.asarray(x, dtype=float)
    n = x.shape[-1]
    codes, g = _codes(clusters, n)
    onehot = np.zeros((n, g))
    onehot[np.arange(n), codes] = 1.0
    mean = x.mean(-1)
    sums = x @ onehot - mean[..., None] * onehot.sum(0)
    se = np.sqrt(g / (g - 1) * (sums ** 2).sum(-1)) / n if g > 1 else np.full_like(mean, np.nan)
    return mean, se, g - 1


def _t_upper(mean, se, df) -> np.ndarray:
    """One-sided p of mean > 0 (1 where the SE is zero and the mean is not positive)."""
    z = np.divide(mean, se, out=np.where(mean > 0, np.inf, -np.inf), where=se > 0)
    return sps.t.sf(z, df)


@dataclass(frozen=True)
class Signed:
    up: np.ndarray        # mean u_i: items moved up beyond rewording noise (mean square excess)
    up_p: np.ndarray      # one-sided
    down: np.ndarray
    down_p: np.ndarray
    both_p: np.ndarray    # intersection-union: max(up_p, down_p)
    n_up: np.ndarray      # items with Delta_F > 0
    n_down: np.ndarray    # items with Delta_F < 0


def signed_excess(frame_delta, paraphrase_delta, clusters=None) -> Signed:
    """The up and down mean-square excesses over half the rewording contrast's mean square, each a one-sided
    cluster t test, and their intersection-union test of "items moved in both directions"."""
    f = np.asarray(frame_delta, dtype=float)
    half = np.asarray(paraphrase_delta, dtype=float) ** 2 / 2
    up, se_u, df = cluster_mean_t(np.maximum(f, 0) ** 2 - half, clusters)
    down, se_d, _ = cluster_mean_t(np.minimum(f, 0) ** 2 - half, clusters)
    up_p, down_p = _t_upper(up, se_u, df), _t_upper(down, se_d, df)
    return Signed(up, up_p, down, down_p, np.maximum(up_p, down_p), (f > 0).sum(-1), (f < 0).sum(-1))


@dataclass(frozen=True)
class Share:
    share: np.ndarray     # (mean F)^2 / mean F^2, NaN when the denominator's estimate is not positive
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray         # one-sided p of H0 share >= margin
    n_items: int


def effective_share(frame_delta, noise_var, clusters=None, margin: float = 0.5, alpha: float = 0.05) -> Share:
    """The share of items carrying the mean effect (module docstring), its (1 - alpha) delta-method interval
    and the one-sided p of "fewer than ``margin`` of the items carry it"."""
    x, v = np.asarray(frame_delta, dtype=float), np.asarray(noise_var, dtype=float)
    w = x ** 2 - v
    n = x.shape[-1]
    u, _, df = cluster_mean_t(x, clusters)
    big_w = w.mean(-1)
    a = u ** 2 - v.mean(-1) / n             # the decode noise of the mean (independent replies) netted out
    ok = big_w > 0
    share = np.where(ok, a / np.where(ok, big_w, 1.0), np.nan)
    g_mean, g_se, _ = cluster_mean_t(2 * u[..., None] * x - margin * w, clusters)
    g = a - margin * big_w                  # < 0: concentrated; its linearisation's SE is g_se
    p = np.where(ok, _t_upper(-g, g_se, df), 1.0)
    r_mean, r_se, _ = cluster_mean_t((2 * u[..., None] * x - np.nan_to_num(share)[..., None] * w)
                                     / np.where(ok, big_w, 1.0)[..., None], clusters)
    crit = sps.t.ppf(1 - alpha / 2, df)
    return Share(share, share - crit * r_se, share + crit * r_se, p, n)


@dataclass(frozen=True)
class Paired:
    difference: np.ndarray   # mean over items of (a - b), the per-item contrasts of two readings of the same items
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray            # two-sided


def paired_difference(a, b, clusters=None, alpha: float = 0.05) -> Paired:
    """The mean per-item difference of two readings of the same items' contrast (on sampled and on greedy
    decodes; under two judges), its (1 - alpha) interval and two-sided cluster t test."""
    m, se, df = cluster_mean_t(np.asarray(a, float) - np.asarray(b, float), clusters)
    crit = sps.t.ppf(1 - alpha / 2, df)
    z = np.divide(np.abs(m), se, out=np.where(m != 0, np.inf, 0.0), where=se > 0)
    return Paired(m, m - crit * se, m + crit * se, 2 * sps.t.sf(z, df))


def decode_dependence(sampled_delta, greedy_delta, clusters=None, alpha: float = 0.05) -> Paired:
    """Frame x greedy/sampled: the mean per-item difference of the contrast on sampled and on greedy decodes."""
    return paired_difference(sampled_delta, greedy_delta, clusters, alpha)


# --- the readings, and their calibration on effect shapes --------------------------------------------------
READINGS = ("directional", "both directions", "concentrated", "decode-dependent", "beyond noise")


def readings(frame_delta, paraphrase_delta, noise_var, sampled_delta, greedy_delta, primary_p, clusters=None,
             alpha: float = 0.05, margin: float = 0.5) -> dict[str, np.ndarray]:
    """Each reading's call (bool arrays) at level ``alpha``: ``directional`` = the primary test (its p given:
    the GEE's Holm p in a run, a t-test stand-in in the simulation); ``both directions`` = ``signed_excess``'s
    intersection-union test; ``concentrated`` = directional AND ``effective_share``'s test; ``decode-dependent``
    = ``decode_dependence``'s test; ``beyond noise`` = the mean-square noise comparison (M > 0, two-sided p)."""
    s = signed_excess(frame_delta, paraphrase_delta, clusters)
    sh = effective_share(frame_delta, noise_var, clusters, margin, alpha)
    dec = decode_dependence(sampled_delta, greedy_delta, clusters, alpha)
    m, se, df = cluster_mean_t(np.asarray(frame_delta, float) ** 2 - np.asarray(paraphrase_delta, float) ** 2, clusters)
    beyond = (m > 0) & (2 * _t_upper(np.abs(m), se, df) < alpha)
    directional = np.asarray(primary_p) < alpha
    return {"directional": directional, "both directions": s.both_p < alpha, "concentrated": directional & (sh.p < alpha),
            "decode-dependent": dec.p < alpha, "beyond noise": beyond}


# the effect shapes of the calibration: (frame effect on the carrying items, share of carrying items, share of
# them moved down, temperatures it acts at ("all" or "top": only the largest), rewording swing SD)
SHAPES = {
    "no effect": dict(effect=0.0, carriers=1.0, down=0.0, acts="all", swing=0.1),
    "uniform +11.8": dict(effect=0.118, carriers=1.0, down=0.0, acts="all", swing=0.1),
    "mixed signs (+-30 points)": dict(effect=0.3, carriers=1.0, down=0.5, acts="all", swing=0.1),
    "concentrated (1/12 items, 100 points)": dict(effect=1.0, carriers=1 / 12, down=0.0, acts="all", swing=0.1),
    "decode-only (+30 at the top T)": dict(effect=0.3, carriers=1.0, down=0.0, acts="top", swing=0.1),
    "non-equivalent paraphrases": dict(effect=0.0, carriers=1.0, down=0.0, acts="all", swing=0.4),
}
# the reading each shape should call (the others must stay at or below the false-positive bound)
TARGET = {"uniform +11.8": "directional", "mixed signs (+-30 points)": "both directions",
          "concentrated (1/12 items, 100 points)": "concentrated", "decode-only (+30 at the top T)": "decode-dependent"}


CHUNK = 500


def _shape_calls(sh: dict, n_items: int, temps: np.ndarray, reps: int, rng, alpha: float, family: int,
                 margin: float) -> dict[str, np.ndarray]:
    """The readings' calls on ``reps`` simulated tables of one shape (``simulate_shapes``)."""
    base = rng.uniform(0.3, 0.7, (reps, n_items))
    swing = rng.normal(0, sh["swing"], (reps, n_items))
    carriers = np.arange(n_items) < max(1, round(sh["carriers"] * n_items))
    sign = np.where(np.arange(n_items) < round(sh["down"] * carriers.sum()), -1.0, 1.0)
    effect = sh["effect"] * carriers * sign
    acts = (temps == temps.max()) if sh["acts"] == "top" else np.ones(len(temps), bool)
    y = np.empty((2, 2, len(temps), reps, n_items))
    for a, fa in enumerate((1, -1)):
        for b, rb in enumerate((1, -1)):
            for k, on in enumerate(acts):
                y[a, b, k] = rng.random((reps, n_items)) < np.clip(base + fa * effect * on / 2 + rb * swing / 2, 0, 1)

    def contrast(cells):   # (frame, paraphrase) contrasts of (2, 2, ...) cell means
        return ((cells[0, 0] + cells[0, 1] - cells[1, 0] - cells[1, 1]) / 2,
                (cells[0, 0] - cells[0, 1] + cells[1, 0] - cells[1, 1]) / 2)

    k = len(temps)
    df, dp = contrast(y.mean(2))
    noise = (y.var(2, ddof=1) / k).sum((0, 1)) / 4 if k > 1 else np.zeros_like(df)
    greedy = contrast(y[:, :, temps == 0].mean(2))[0]
    sampled = contrast(y[:, :, temps > 0].mean(2))[0]
    m, se, dof = cluster_mean_t(df)
    primary_p = np.minimum(1.0, 2 * _t_upper(np.abs(m), se, dof) * family)
    return readings(df, dp, noise, sampled, greedy, primary_p, None, alpha, margin)


def simulate_shapes(n_items: int, temperatures, reps: int, seed: int, alpha: float = 0.05, family: int = 3,
                    margin: float = 0.5, shapes: dict | None = None) -> list[dict]:
    """Each reading's call rate per shape: ``reps`` tables of ``n_items`` items, two frames x two rewordings x
    one decode per temperature in ``temperatures`` (the first, 0, greedy). Per item a base rate uniform in
    [0.3, 0.7], a rewording swing N(0, swing) of random sign (A +s/2, B -s/2), and the shape's frame effect
    (f1 +e/2, f2 -e/2, down-moved items with -e) on its carriers at the temperatures it acts at; probabilities
    clipped to [0, 1]; each reply Bernoulli. The primary's stand-in is the t test of mean Delta_F at alpha /
    ``family`` (Holm's strictest step of a family of ``family`` contrasts). Returns one dict per shape and reading
    with the rate and its Monte Carlo standard error."""
    rng = np.random.default_rng(seed)
    temps = np.asarray(temperatures, float)
    out = []
    for name, sh in (shapes or SHAPES).items():
        counts = dict.fromkeys(READINGS, 0)
        for start in range(0, reps, CHUNK):      # chunks of draws keep the arrays small at the paper's size
            for reading, c in _shape_calls(sh, n_items, temps, min(CHUNK, reps - start), rng, alpha, family,
                                           margin).items():
                counts[reading] += int(c.sum())
        for reading, c in counts.items():
            rate = c / reps
            out.append({"shape": name, "reading": reading, "n_items": n_items, "n_decodes": len(temps), "reps": reps,
                        "rate": rate, "mc_se": float(np.sqrt(rate * (1 - rate) / reps)),
                        "target": TARGET.get(name) == reading})
    return out
