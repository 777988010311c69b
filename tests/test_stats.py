"""Statistics against independent computations (hand-derived values, scipy)."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from refusal_audit import stats


def paired(b, c, both=0, neither=0):
    a = np.array([1] * both + [1] * b + [0] * c + [0] * neither, dtype=bool)
    x = np.array([1] * both + [0] * b + [1] * c + [0] * neither, dtype=bool)
    return a, x


def test_mcnemar_38_vs_3_discordant():
    a, b = paired(38, 3, both=157, neither=2)
    m = stats.mcnemar_exact(a, b)
    assert (m.b, m.c, m.n) == (38, 3, 200)
    assert f"{m.pvalue:.2e}" == "1.05e-08"
    hand = 2 * sum(math.comb(41, i) for i in range(4)) / 2**41
    assert m.pvalue == pytest.approx(hand, rel=1e-9)
    assert m.pvalue == pytest.approx(sps.binomtest(3, 41, 0.5).pvalue, rel=1e-9)


def test_mcnemar_without_discordant_pairs_is_one():
    a, b = paired(0, 0, both=10, neither=5)
    assert stats.mcnemar_exact(a, b).pvalue == 1.0


def test_wilson_196_of_200_by_hand():
    k, n, z = 196, 200, sps.norm.ppf(0.975)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    r = stats.wilson(k, n)
    assert r.rate == 0.98
    assert r.lo == pytest.approx(centre - half, abs=1e-12)
    assert r.hi == pytest.approx(centre + half, abs=1e-12)
    assert (round(r.lo, 4), round(r.hi, 4)) == (0.9497, 0.9922)


@pytest.mark.parametrize("k, n", [(-1, 10), (11, 10), (0, 0)])
def test_wilson_rejects_impossible_counts(k, n):
    with pytest.raises(ValueError):
        stats.wilson(k, n)


def test_bootstrap_reproducible_and_covers_estimate():
    rng = np.random.default_rng(1)
    a = rng.random(200) < 0.98
    b = rng.random(200) < 0.8
    first = stats.bootstrap_diff_ci(a, b, 2000, seed=7)
    assert first == stats.bootstrap_diff_ci(a, b, 2000, seed=7)
    assert first != stats.bootstrap_diff_ci(a, b, 2000, seed=8)
    est, lo, hi = first
    assert est == pytest.approx(a.mean() - b.mean())
    assert lo < est < hi
    # independent check: a hand-rolled percentile bootstrap lands within Monte-Carlo error
    d = a.astype(float) - b.astype(float)
    draws = np.random.default_rng(0).choice(d, size=(4000, len(d))).mean(axis=1)
    assert lo == pytest.approx(np.quantile(draws, 0.025), abs=0.015)
    assert hi == pytest.approx(np.quantile(draws, 0.975), abs=0.015)


def test_rate_table_and_paired_tests():
    df = pd.DataFrame({
        "item": list(range(10)) * 2, "policy": ["full"] * 10 + ["sink_tail"] * 10,
        "refusal": [True] * 10 + [True] * 4 + [False] * 6,
    })
    rates = stats.rate_table(df, ["policy"], "refusal").set_index("policy")
    assert rates.loc["full", "rate"] == 1.0 and rates.loc["sink_tail", "k"] == 4
    assert rates.loc["sink_tail", "ci_lo"] == pytest.approx(stats.wilson(4, 10).lo)
    tests = stats.paired_tests(df.assign(g=1), "item", "policy", "full", "refusal", ["g"], 500, 0)
    row = tests.iloc[0]
    assert (row["only_baseline"], row["only_arm"], row["drop"]) == (6, 0, pytest.approx(0.6))
    assert row["mcnemar_p"] == pytest.approx(sps.binomtest(0, 6, 0.5).pvalue)
