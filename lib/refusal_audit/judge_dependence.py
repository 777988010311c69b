"""Does a within-item contrast survive a change of judge? Two judges read the SAME replies; per item the
contrast under each (``stats.frame_contrasts`` on each judge's labels) and their paired difference
(``divergence.paired_difference``: mean over items, cluster t test) say whether the judges see different
effects; Cohen's kappa with an item-cluster bootstrap interval says how far they agree reply by reply.

Why a paired difference and not "significant under one judge, not under the other": a difference in
significance is not a significant difference (one judge at p 0.04 and one at 0.06 differ by nothing), and
with no effect two judges each erring in their own way reach "significant under exactly one" at up to twice
a test's size; the paired test compares the two estimates on the same replies at its own level. The
calibration (``simulate_judges``) plants both cases: judges that err differently with no effect, and one
judge that misses a share of a real effect.
"""
from __future__ import annotations

import numpy as np

from .divergence import _t_upper, cluster_mean_t, paired_difference


def binary_kappa(n11, n10, n01, n00) -> np.ndarray:
    """Cohen's kappa of two binary raters from their 2 x 2 counts (vectorised; NaN where undefined)."""
    n = n11 + n10 + n01 + n00
    po = (n11 + n00) / n
    pa, pb = (n11 + n10) / n, (n11 + n01) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    return np.divide(po - pe, 1 - pe, out=np.full(np.shape(pe), np.nan), where=(1 - pe) > 1e-12)


def kappa_interval(a, b, clusters, n_boot: int, seed: int, alpha: float = 0.05) -> tuple[float, float, float]:
    """(kappa, lo, hi): Cohen's kappa of two binary label vectors on the same replies and its percentile
    interval from ``n_boot`` resamples of whole clusters (replies of one item move together)."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    codes = np.unique(np.asarray(clusters), return_inverse=True)[1].ravel()
    g = codes.max() + 1
    cells = np.stack([np.bincount(codes, (a & b), g), np.bincount(codes, (a & ~b), g),
                      np.bincount(codes, (~a & b), g), np.bincount(codes, (~a & ~b), g)])
    draw = np.random.default_rng(seed).integers(0, g, size=(n_boot, g))
    boot = binary_kappa(*cells[:, draw].sum(-1))
    lo, hi = np.nanquantile(boot, [alpha / 2, 1 - alpha / 2])
    return float(binary_kappa(*cells.sum(-1))), float(lo), float(hi)


# --- calibration -------------------------------------------------------------------------------------------
# (a judge that errs more also attenuates a real contrast by 1 - 2 x its error rate: the paired test calls that
# a judge-dependent SIZE, rightly; the case with a real effect and no dependence has equally accurate judges)
CASES = {
    "no effect, judges err differently": dict(effect=0.0, miss=0.0, same_error=False),
    "real effect, judges equally accurate": dict(effect=None, miss=0.0, same_error=True),
    "real effect, judge B misses 40 %": dict(effect=None, miss=0.4, same_error=True),
}


def simulate_judges(n_items: int, n_decodes: int, effect: float, reps: int, seed: int, alpha: float = 0.05,
                    family: int = 3, error_a: float = 0.05, error_b: float = 0.15, cases: dict | None = None) -> list[dict]:
    """Call rates over ``reps`` tables of ``n_items`` items, two frames x two rewordings x ``n_decodes`` replies:
    per item a true refusal rate uniform in [0.3, 0.7], +``effect`` / 2 under f1 and -``effect`` / 2 under f2;
    judge A reads each reply's truth with error ``error_a`` (a flip), judge B with ``error_b`` (``error_a`` where
    the case says ``same_error``), independently,
    and where B ``miss``-es a share of the effect it calls non-refusal a frame-caused refusal under f1 with the
    probability that removes that share of B's contrast. Per table: each judge's primary stand-in (t test of mean
    Delta at alpha / ``family``) and the paired difference test at alpha ("judge-dependent")."""
    rng = np.random.default_rng(seed)
    out = []
    for name, case in (cases or CASES).items():
        e = effect if case["effect"] is None else case["effect"]
        base = rng.uniform(0.3, 0.7, (reps, n_items, 1))
        contrasts = {}
        truth = {f: rng.random((reps, n_items, 2 * n_decodes)) < np.clip(base + s * e / 2, 0, 1)
                 for f, s in (("f1", 1), ("f2", -1))}
        lab_a = {f: t ^ (rng.random(t.shape) < error_a) for f, t in truth.items()}
        err_b = error_a if case["same_error"] else error_b
        lab_b = {f: t ^ (rng.random(t.shape) < err_b) for f, t in truth.items()}
        if case["miss"] and e > 0:   # B loses the share ``miss`` of the contrast: refusals under f1 dropped
            p1, p2 = np.clip(base + e / 2, 0, 1), np.clip(base - e / 2, 0, 1)
            drop = case["miss"] * (p1 - p2) / np.maximum(p1, 1e-9)
            lab_b["f1"] = lab_b["f1"] & ~(truth["f1"] & (rng.random(truth["f1"].shape) < drop))
        for judge, lab in (("A", lab_a), ("B", lab_b)):
            contrasts[judge] = lab["f1"].mean(-1) - lab["f2"].mean(-1)
        calls = {}
        for judge, c in contrasts.items():
            m, se, df = cluster_mean_t(c)
            calls[f"significant under {judge}"] = np.minimum(1, 2 * _t_upper(np.abs(m), se, df) * family) < alpha
        calls["judge-dependent"] = paired_difference(contrasts["A"], contrasts["B"]).p < alpha
        calls["significant under exactly one"] = calls["significant under A"] ^ calls["significant under B"]
        for reading, c in calls.items():
            rate = float(c.mean())
            out.append({"case": name, "reading": reading, "n_items": n_items, "n_decodes": n_decodes, "effect": e,
                        "reps": reps, "rate": rate, "mc_se": float(np.sqrt(rate * (1 - rate) / reps))})
    return out
