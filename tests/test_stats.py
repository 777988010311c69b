"""Statistics against independent computations (hand-derived values, scipy, statsmodels, hand-built numpy)."""
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

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


def test_wilson_holds_the_rate_at_the_edges():
    """At k = 0 and k = n the interval ends at the rate exactly (the closed form gives 0 and 1; a figure's
    error bar rate - lo must not be negative)."""
    for n in range(1, 80):
        assert stats.wilson(0, n).lo == 0.0 and stats.wilson(n, n).hi == 1.0
        assert all(r.lo <= r.rate <= r.hi for r in (stats.wilson(k, n) for k in range(n + 1)))


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


# --- frames study: per-item contrasts and the paraphrase-noise band ---------------------------------

# positives out of 7 decodes per (item, frame, paraphrase): a design whose contrasts are known by hand
COUNTS = {
    ("m1", "i1"): {("E", "A"): 5, ("E", "B"): 3, ("D", "A"): 1, ("D", "B"): 2, ("N", "A"): 0, ("N", "B"): 7},
    ("m1", "i2"): {("E", "A"): 7, ("E", "B"): 7, ("D", "A"): 0, ("D", "B"): 0, ("N", "A"): 4, ("N", "B"): 4},
    ("m2", "i1"): {("E", "A"): 0, ("E", "B"): 1, ("D", "A"): 6, ("D", "B"): 6, ("N", "A"): 2, ("N", "B"): 3},
}


def frame_design(counts=COUNTS, decodes=7, seed=0):
    rows = [{"model": m, "item": i, "frame": f, "paraphrase": r, "decode": d, "y": d < k}
            for (m, i), cells in counts.items() for (f, r), k in cells.items() for d in range(decodes)]
    return pd.DataFrame(rows).sample(frac=1, random_state=seed).reset_index(drop=True)  # order must not matter


def test_frame_contrasts_by_hand():
    pairs = [("E", "D"), ("E", "N"), ("D", "N")]
    got = stats.frame_contrasts(frame_design(), "item", "frame", "paraphrase", "y", pairs, by=["model"])
    got = got.set_index(["model", "item", "f1", "f2"])["delta"]
    hand = {  # 1/2 * sum_r (k_f1r - k_f2r) / 7
        ("m1", "i1", "E", "D"): 0.5 * ((5 - 1) + (3 - 2)) / 7, ("m1", "i1", "E", "N"): 0.5 * ((5 - 0) + (3 - 7)) / 7,
        ("m1", "i1", "D", "N"): 0.5 * ((1 - 0) + (2 - 7)) / 7, ("m1", "i2", "E", "D"): 1.0,
        ("m1", "i2", "E", "N"): 3 / 7, ("m1", "i2", "D", "N"): -4 / 7,
        ("m2", "i1", "E", "D"): 0.5 * (-6 - 5) / 7, ("m2", "i1", "E", "N"): 0.5 * (-2 - 2) / 7,
        ("m2", "i1", "D", "N"): 0.5 * (4 + 3) / 7,
    }
    assert len(got) == len(hand)
    for key, value in hand.items():
        assert got[key] == pytest.approx(value, abs=1e-12), key
    # contrasts are additive: (E,N) = (E,D) + (D,N)
    for m, i in COUNTS:
        assert got[m, i, "E", "N"] == pytest.approx(got[m, i, "E", "D"] + got[m, i, "D", "N"])


def test_frame_contrasts_missing_cell_and_unparseable_rows():
    df = frame_design()
    df = df[~((df["item"] == "i2") & (df["frame"] == "D") & (df["paraphrase"] == "B"))]  # a lost cell
    extra = pd.DataFrame([{"model": "m1", "item": "i1", "frame": "E", "paraphrase": "A", "decode": 7, "y": np.nan}])
    df = pd.concat([df.astype({"y": float}), extra], ignore_index=True)  # an unparseable decode: dropped
    got = stats.frame_contrasts(df, "item", "frame", "paraphrase", "y", [("E", "D"), ("E", "N")], by=["model"])
    got = got.set_index(["model", "item", "f1", "f2"])
    assert np.isnan(got.loc[("m1", "i2", "E", "D"), "delta"])  # never a silent one-paraphrase estimate
    assert got.loc[("m1", "i2", "E", "N"), "delta"] == pytest.approx(3 / 7)
    assert got.loc[("m1", "i1", "E", "D"), "delta"] == pytest.approx(5 / 14)
    assert got.loc[("m1", "i1", "E", "D"), "n_paraphrases"] == 2
    with pytest.raises(ValueError, match="frames"):
        stats.frame_contrasts(df, "item", "frame", "paraphrase", "y", [("E", "X")])


def test_paraphrase_gaps_and_noise_band_by_hand():
    df = frame_design()
    gaps = stats.paraphrase_gaps(df, "item", "frame", "paraphrase", "y", by=["model"])
    gaps = gaps.set_index(["model", "item", "frame"])["gap"]
    assert gaps["m1", "i1", "E"] == pytest.approx(2 / 7) and gaps["m1", "i1", "N"] == pytest.approx(1.0)
    assert gaps["m1", "i2", "E"] == 0 and gaps["m2", "i1", "N"] == pytest.approx(1 / 7)
    band = stats.paraphrase_noise_band(df, "item", "frame", "paraphrase", "y", by=["model"], q=0.95).set_index("model")
    # m1 gaps (in sevenths): i1 -> 2, 1, 7; i2 -> 0, 0, 0; sorted 0 0 0 1 2 7; q95 at position 5*0.95 = 4.75
    assert band.loc["m1", "n_cells"] == 6
    assert band.loc["m1", "mean_gap"] == pytest.approx(10 / 42)
    assert band.loc["m1", "q_gap"] == pytest.approx((2 + 0.75 * (7 - 2)) / 7)
    # m2 gaps: 1, 0, 1 (sevenths); sorted 0 1 1 -> position 1.9 -> 1
    assert band.loc["m2", "mean_gap"] == pytest.approx(2 / 21) and band.loc["m2", "q_gap"] == pytest.approx(1 / 7)
    per_frame = stats.paraphrase_noise_band(df, "item", "frame", "paraphrase", "y", by=["model", "frame"])
    assert per_frame.set_index(["model", "frame"]).loc[("m1", "N"), "mean_gap"] == pytest.approx(0.5)
    pooled = stats.paraphrase_noise_band(df[df["model"] == "m1"], "item", "frame", "paraphrase", "y")
    assert pooled[["n_cells", "mean_gap"]].iloc[0].tolist() == [6, pytest.approx(10 / 42)]
    one = df[~((df["item"] == "i2") & (df["paraphrase"] == "B"))]  # i2 keeps one paraphrase: no gap there
    assert stats.paraphrase_noise_band(one, "item", "frame", "paraphrase", "y", by=["model"]).set_index(
        "model").loc["m1", "n_cells"] == 3


def test_mean_centre_over_clusters_by_hand():
    df = pd.DataFrame({"item": ["a", "a", "a", "b"], "c": [1.0, 1.0, 1.0, 3.0]})
    assert stats.mean_centre(df, "c", cluster="item").tolist() == [-1.0, -1.0, -1.0, 1.0]  # item mean 2
    assert stats.mean_centre(df, "c").tolist() == [-0.5, -0.5, -0.5, 1.5]  # row mean 1.5
    with pytest.raises(ValueError, match="varies"):
        stats.mean_centre(df.assign(c=[1.0, 2.0, 1.0, 3.0]), "c", cluster="item")


# --- GEE marginal logistic model against a hand-built sandwich ----------------------------------------

FORMULA = "y ~ C(frame, Treatment('N')) + C(paraphrase) + c_centred + C(frame, Treatment('N')):c_centred"


def clustered_frames(n_items, seed, frame_effect=(1.0, -0.5), sd_item=1.0, decodes=7):
    """Binary outcomes with a random item intercept, effects (E vs N, D vs N) on the conditional
    log-odds, a paraphrase effect and an item-level covariate with a frame interaction."""
    rng = np.random.default_rng(seed)
    u = rng.normal(0, sd_item, n_items)
    c = rng.normal(2, 1, n_items)
    beta_e, beta_d = frame_effect
    rows = []
    for i in range(n_items):
        for f in "EDN":
            for r in "AB":
                for _ in range(decodes):
                    rows.append({"item": f"it{i:03d}", "frame": f, "paraphrase": r, "c": c[i],
                                 "eta": -0.3 + u[i] + beta_e * (f == "E") + beta_d * (f == "D") + 0.2 * (r == "B")})
    df = pd.DataFrame(rows)
    df["c_centred"] = stats.mean_centre(df, "c", cluster="item")
    df["eta"] += 0.3 * df["c_centred"] + 0.4 * df["c_centred"] * (df["frame"] == "E")
    df["y"] = rng.random(len(df)) < 1 / (1 + np.exp(-df["eta"]))
    return df


def hand_design(df):
    """The formula's design matrix, built column by column in patsy's order."""
    e, d = (df["frame"] == "E").astype(float), (df["frame"] == "D").astype(float)
    c = df["c_centred"].to_numpy()
    return np.column_stack([np.ones(len(df)), d, e, (df["paraphrase"] == "B").astype(float), c, d * c, e * c])


def hand_logit_sandwich(x, y, groups):
    """Logistic MLE by Newton-Raphson, then A = X'WX, the Liang-Zeger meat B = sum_g s_g s_g' with
    s_g = X_g'(y_g - mu_g), and the Mancl-DeRouen meat with r_g replaced by (I - H_g)^-1 r_g,
    H_g = W_g X_g A^-1 X_g'."""
    beta = np.zeros(x.shape[1])
    for _ in range(50):
        mu = 1 / (1 + np.exp(-x @ beta))
        step = np.linalg.solve(x.T @ (x * (mu * (1 - mu))[:, None]), x.T @ (y - mu))
        beta += step
        if np.abs(step).max() < 1e-13:
            break
    mu = 1 / (1 + np.exp(-x @ beta))
    w = mu * (1 - mu)
    a_inv = np.linalg.inv(x.T @ (x * w[:, None]))
    meat, meat_md = np.zeros_like(a_inv), np.zeros_like(a_inv)
    for g in np.unique(groups):
        rows = groups == g
        xg, rg = x[rows], (y - mu)[rows]
        s = xg.T @ rg
        meat += np.outer(s, s)
        h = (w[rows][:, None] * xg) @ a_inv @ xg.T
        s_md = xg.T @ np.linalg.solve(np.eye(len(rg)) - h, rg)
        meat_md += np.outer(s_md, s_md)
    return beta, a_inv @ meat @ a_inv, a_inv @ meat_md @ a_inv


@pytest.fixture(scope="module")
def pilot():
    """20 item clusters, as in the pilot, and the hand-built estimates."""
    df = clustered_frames(20, seed=11)
    x, y = hand_design(df), df["y"].to_numpy(dtype=float)
    return df, hand_logit_sandwich(x, y, df["item"].to_numpy())


def test_gee_matches_hand_built_sandwich(pilot):
    df, (beta, cov_lz, cov_md) = pilot
    robust = stats.fit_gee_logit(df, FORMULA, "item", cov_type="robust")
    assert list(robust.params.index) == [
        "Intercept", "C(frame, Treatment('N'))[T.D]", "C(frame, Treatment('N'))[T.E]", "C(paraphrase)[T.B]",
        "c_centred", "C(frame, Treatment('N'))[T.D]:c_centred", "C(frame, Treatment('N'))[T.E]:c_centred"]
    np.testing.assert_allclose(robust.params, beta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(robust.cov_params(), cov_lz, rtol=1e-9, atol=1e-12)
    # independence working correlation: the point estimates are a plain logistic GLM's
    glm = sm.GLM(df["y"].astype(float), hand_design(df), family=sm.families.Binomial()).fit()
    np.testing.assert_allclose(robust.params, glm.params, rtol=1e-9, atol=1e-12)
    # the default: the Mancl-DeRouen bias-reduced sandwich, larger than Liang-Zeger's with 20 clusters
    md = stats.fit_gee_logit(df, FORMULA, "item")
    np.testing.assert_allclose(md.params, beta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(md.cov_params(), cov_md, rtol=1e-9, atol=1e-12)
    assert (np.diag(cov_md) > np.diag(cov_lz)).all()


def test_the_risk_difference_gee_is_ols_with_the_cluster_sandwich(pilot):
    """fit_gee_linear against statsmodels' OLS with cluster-robust (CR0) errors, and its Mancl-DeRouen
    covariance against the same sandwich built by hand (identity link: H_g = X_g (X'X)^-1 X_g')."""
    df = pilot[0]
    x, y, groups = hand_design(df), df["y"].to_numpy(dtype=float), df["item"].to_numpy()
    ols = sm.OLS(y, x).fit(cov_type="cluster", cov_kwds={"groups": pd.factorize(groups)[0], "use_correction": False})
    lz = stats.fit_gee_linear(df, FORMULA, "item", cov_type="robust")
    np.testing.assert_allclose(lz.params, ols.params, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(lz.cov_params(), ols.cov_params(), rtol=1e-8, atol=1e-14)
    bread = np.linalg.inv(x.T @ x)
    meat = np.zeros_like(bread)
    for g in np.unique(groups):
        rows = groups == g
        xg, rg = x[rows], y[rows] - x[rows] @ ols.params
        s_md = xg.T @ np.linalg.solve(np.eye(len(rg)) - xg @ bread @ xg.T, rg)
        meat += np.outer(s_md, s_md)
    md = stats.fit_gee_linear(df, FORMULA, "item")
    np.testing.assert_allclose(md.cov_params(), bread @ meat @ bread, rtol=1e-8, atol=1e-14)
    # defined where the logit separates: every E reply a refusal
    sep = df.assign(y=np.where(df["frame"] == "E", 1, df["y"]))
    assert np.isfinite(np.sqrt(np.diag(stats.fit_gee_linear(sep, FORMULA, "item").cov_params()))).all()


def test_gee_table_z_and_t(pilot):
    df, (beta, _, cov_md) = pilot
    res = stats.fit_gee_logit(df, FORMULA, "item")
    tab = stats.gee_table(res)
    se = np.sqrt(np.diag(cov_md))
    assert list(tab.columns) == ["term", "estimate", "se", "stat", "dist", "df", "p", "ci_lo", "ci_hi",
                                 "n_clusters", "cov_type"]
    assert set(tab["n_clusters"]) == {20} and set(tab["cov_type"]) == {"bias_reduced"}
    np.testing.assert_allclose(tab["se"], se, rtol=1e-6)
    np.testing.assert_allclose(tab["p"], 2 * sps.norm.sf(np.abs(beta / se)), rtol=1e-5)
    np.testing.assert_allclose(tab["ci_hi"], beta + 1.959963984540054 * se, rtol=1e-6)
    t = stats.gee_table(res, use_t=True)
    assert set(t["dist"]) == {"t"} and set(t["df"]) == {19.0}
    np.testing.assert_allclose(t["p"], 2 * sps.t.sf(np.abs(beta / se), 19), rtol=1e-5)
    np.testing.assert_allclose(t["ci_lo"], beta - sps.t.ppf(0.975, 19) * se, rtol=1e-6)
    assert (t["p"] > tab["p"]).all()


def test_gee_exchangeable_and_bad_arguments(pilot):
    df, (beta, _, _) = pilot
    ex = stats.gee_table(stats.fit_gee_logit(df, FORMULA, "item", cov_struct="exchangeable"))
    assert np.isfinite(ex[["estimate", "se", "p"]].to_numpy()).all()
    assert ex["estimate"].to_numpy() == pytest.approx(beta, abs=0.5)
    with pytest.raises(ValueError):
        stats.fit_gee_logit(df, FORMULA, "item", cov_struct="ar1")
    with pytest.raises(ValueError):
        stats.fit_gee_logit(df, FORMULA, "item", cov_type="naive")


def test_gee_recovers_marginal_frame_effect_on_large_simulation():
    beta_e, beta_d, sd = 1.0, -0.5, 1.0
    df = clustered_frames(400, seed=5, frame_effect=(beta_e, beta_d), sd_item=sd)
    df["eta"] -= 0.3 * df["c_centred"] + 0.4 * df["c_centred"] * (df["frame"] == "E")  # frame + paraphrase only
    df["y"] = np.random.default_rng(6).random(len(df)) < 1 / (1 + np.exp(-df["eta"]))
    tab = stats.gee_table(stats.fit_gee_logit(df, "y ~ C(frame, Treatment('N')) + C(paraphrase)", "item"))
    tab = tab.set_index("term")
    # the marginal (population-averaged) log-odds ratio, integrating the item intercept by Gauss-Hermite
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    weights = weights / weights.sum()

    def marginal_logit(eta):
        p = weights @ (1 / (1 + np.exp(-(eta + sd * nodes))))
        return np.log(p / (1 - p))

    for term, beta in (("C(frame, Treatment('N'))[T.E]", beta_e), ("C(frame, Treatment('N'))[T.D]", beta_d)):
        truth = np.mean([marginal_logit(-0.3 + beta + 0.2 * b) - marginal_logit(-0.3 + 0.2 * b) for b in (0, 1)])
        row = tab.loc[term]
        assert row["ci_lo"] < truth < row["ci_hi"], (term, truth, row["ci_lo"], row["ci_hi"])
        assert abs(truth) < abs(beta)  # the marginal effect is attenuated from the conditional one


def test_wald_terms_against_statsmodels_and_by_hand(pilot):
    df, _ = pilot
    res = stats.fit_gee_logit(df, FORMULA, "item")
    w = stats.wald_terms(res, ":c_centred")
    assert w.terms == ("C(frame, Treatment('N'))[T.D]:c_centred", "C(frame, Treatment('N'))[T.E]:c_centred")
    assert w.df == 2
    b = res.params.to_numpy()[5:7]
    v = res.cov_params().to_numpy()[5:7, 5:7]
    assert w.chi2 == pytest.approx(b @ np.linalg.inv(v) @ b, rel=1e-9)
    r = np.zeros((2, 7))
    r[0, 5] = r[1, 6] = 1
    sm_test = res.wald_test(r, scalar=True)
    assert w.chi2 == pytest.approx(float(sm_test.statistic), rel=1e-9)
    assert w.pvalue == pytest.approx(float(sm_test.pvalue), rel=1e-9)
    assert stats.wald_terms(res, list(w.terms)) == w
    with pytest.raises(ValueError):
        stats.wald_terms(res, ["no_such_term"])


def test_holm_by_hand():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> monotone: 0.06
    got = stats.holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(got, [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    with_nan = stats.holm([0.01, np.nan, 0.04, 0.03, 0.005])
    assert np.isnan(with_nan[1])
    np.testing.assert_allclose(with_nan[[0, 2, 3, 4]], [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    np.testing.assert_allclose(stats.holm([0.9, 0.02]), [0.9, 0.04])  # 0.02*2; 0.9*1 stays 0.9
    np.testing.assert_allclose(stats.holm([0.5, 0.9]), [1.0, 1.0])  # 0.5*2 = 1, then monotone
    rng = np.random.default_rng(0)  # against statsmodels, ties and p = 0 / 1 included
    for m in (1, 2, 7, 30):
        p = np.round(rng.uniform(0, 0.2, m) ** 2, 3)
        p[: m // 3] = p[0]
        p[-1:] = rng.choice([0.0, 1.0, p[-1]])
        np.testing.assert_allclose(stats.holm(p), multipletests(p, method="holm")[1], rtol=1e-12)


# --- policy study ------------------------------------------------------------------------------

def ten_arms():
    return pd.Series([100.0, 1.0, 0.0, 0.5, 17.0, 100.0 - 1e-9, 99.0, 98.0, 3.0, 2.0],
                     index=[f"E{i}" for i in range(1, 11)])


@pytest.mark.parametrize("k, printed", [(4, 0.00476), (5, 0.00397)])
def test_rank_test_top_k_is_one_over_n_choose_k(k, printed):
    scores = ten_arms()
    top = scores.sort_values().index[-k:]
    res = stats.exchangeability_rank_test(scores, top)
    assert (res.n, res.k) == (10, k)
    assert res.pvalue == pytest.approx(1 / math.comb(10, k), rel=1e-12)
    assert round(res.pvalue, 5) == printed
    bottom = scores.sort_values().index[:k]
    assert stats.exchangeability_rank_test(scores, bottom, "less").pvalue == pytest.approx(1 / math.comb(10, k))
    assert stats.exchangeability_rank_test(scores, bottom, "two-sided").pvalue == pytest.approx(2 / math.comb(10, k))
    assert stats.exchangeability_rank_test(scores, bottom).pvalue == 1.0


@pytest.mark.parametrize("scores, designated", [
    ([3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0], ["a", "c", "f"]),   # with a tie
    ([0.2, 0.9, 0.4, 0.8, 0.1, 0.7, 0.3], ["b", "g"]),
    ([1.0, 1.0, 1.0, 2.0, 2.0, 0.0, 5.0], ["d", "e", "a", "g"]),
])
def test_rank_test_against_exhaustive_permutations(scores, designated):
    import itertools

    arms = list("abcdefg")
    s = pd.Series(scores, index=arms)
    ranks = sps.rankdata(scores)
    flags = np.array([a in designated for a in arms])
    obs = ranks[flags].sum()
    centre = flags.sum() * (len(arms) + 1) / 2
    sums = np.array([ranks[np.array(p)].sum() for p in itertools.permutations(flags)])  # all 5040 labellings
    hand = {"greater": np.mean(sums >= obs - 1e-9), "less": np.mean(sums <= obs + 1e-9),
            "two-sided": np.mean(np.abs(sums - centre) >= abs(obs - centre) - 1e-9)}
    for alternative, p in hand.items():
        res = stats.exchangeability_rank_test(s, designated, alternative)
        assert res.rank_sum == pytest.approx(obs)
        assert res.pvalue == pytest.approx(p, abs=1e-12), alternative


def test_rank_test_rejects_bad_designs():
    with pytest.raises(ValueError):
        stats.exchangeability_rank_test(ten_arms(), ["E1", "E99"])
    with pytest.raises(ValueError):
        stats.exchangeability_rank_test(ten_arms(), list(ten_arms().index))
    with pytest.raises(ValueError):
        stats.exchangeability_rank_test(ten_arms(), ["E1"], alternative="sideways")


def test_range_floor_ratio_rules():
    got = stats.range_floor_ratio([1.0, 2.0, 0.0, np.nan, 3.0], [2.0, 0.0, 0.0, 1.0, np.nan])
    assert got[0] == 0.5 and got[1] == np.inf
    assert np.isnan(got[2:]).all()
    with pytest.raises(ValueError):
        stats.range_floor_ratio([-1.0], [1.0])


def test_definition_sensitivity_by_hand():
    arms = pd.DataFrame({"benchmark": ["X"] * 4 + ["Y"] * 3 + ["Z"] * 2,
                         "score": [0.0, 1.0, 100.0, 17.0, 50.0, 52.0, 51.0, 5.0, 5.0]})
    seeds = pd.DataFrame({
        "benchmark": ["X"] * 7 + ["Y"] * 3,
        "recipe": ["r1"] * 3 + ["r2"] * 3 + ["r3"] + ["r1"] * 3,
        "score": [0.0, 71.0, 30.0, 4.0, 4.0, 8.0, 50.0, 3.0, 3.0, 3.0],
    })
    floor = stats.seed_floor(seeds, "benchmark", "recipe", "score").set_index("benchmark")
    assert floor.loc["X", ["n_recipes", "phi_min", "phi_median", "phi_max", "phi"]].tolist() == [2, 4, 37.5, 71, 71]
    assert floor.loc["Y", "phi"] == 0
    table = stats.definition_sensitivity(arms, seeds, "benchmark", "recipe", "score").set_index("benchmark")
    assert table.loc["X", "delta"] == 100 and table.loc["X", "n_models"] == 4
    assert table.loc["X", "ratio"] == pytest.approx(100 / 71)
    assert table.loc["Y", "delta"] == 2 and table.loc["Y", "ratio"] == np.inf  # zero floor, non-zero range
    assert table.loc["Z", "delta"] == 0 and np.isnan(table.loc["Z", "ratio"])  # no floor measured
    with pytest.raises(ValueError):
        stats.seed_floor(seeds[seeds["recipe"] == "r3"], "benchmark", "recipe", "score")


# --- cluster bootstrap -------------------------------------------------------------------------

def clustered_values(n_clusters, size, seed, icc_sd=1.0):
    rng = np.random.default_rng(seed)
    u = np.repeat(rng.normal(0, icc_sd, n_clusters), size)
    return pd.DataFrame({"intent": np.repeat([f"k{j}" for j in range(n_clusters)], size),
                         "v": u + rng.normal(0, 1, n_clusters * size)})


def test_cluster_bootstrap_deterministic_and_equal_to_vectorised_mean():
    df = clustered_values(25, 6, seed=3)
    mean = lambda d: d["v"].mean()  # noqa: E731
    first = stats.cluster_bootstrap_ci(df, "intent", mean, 300, seed=9)
    assert first == stats.cluster_bootstrap_ci(df, "intent", mean, 300, seed=9)
    assert first != stats.cluster_bootstrap_ci(df, "intent", mean, 300, seed=10)
    assert first[0] == df["v"].mean()
    assert first[1] < first[0] < first[2]
    fast = stats.cluster_bootstrap_mean(df, "intent", "v", 300, seed=9)
    assert fast == pytest.approx(first, abs=1e-12)
    # whole clusters are resampled and each drawn copy counts as its own cluster
    n_clusters = lambda d: d["intent"].nunique()  # noqa: E731
    assert stats.cluster_bootstrap_ci(df, "intent", n_clusters, 50, seed=1) == (25.0, 25.0, 25.0)
    sizes = lambda d: d.groupby("intent").size().std()  # noqa: E731
    assert stats.cluster_bootstrap_ci(df, "intent", sizes, 50, seed=1) == (0.0, 0.0, 0.0)


def test_cluster_bootstrap_covers_the_mean_at_the_nominal_rate():
    hits = 0
    for rep in range(300):
        df = clustered_values(30, 10, seed=100 + rep)
        _, lo, hi = stats.cluster_bootstrap_mean(df, "intent", "v", 999, seed=rep)
        hits += lo < 0.0 < hi
    assert 0.88 <= hits / 300 <= 0.99


# --- Spearman's rank correlation -----------------------------------------------------------------

def _mid_ranks(v):
    """Ranks 1..n by hand, ties sharing the mean of the positions they occupy."""
    order = sorted(range(len(v)), key=lambda i: v[i])
    ranks = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for m in range(i, j + 1):
            ranks[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@pytest.mark.parametrize("x, y", [
    ([0.91, 0.85, 0.88, 0.70, 0.95, 0.60, 0.77], [1.0, 0.2, 0.9, 0.1, 0.8, 0.0, 0.5]),
    ([1, 2, 2, 3, 4, 4, 4, 5], [3, 1, 2, 2, 5, 4, 6, 6]),  # ties on both sides
    ([3.0, 1.0, 2.0, 5.0, 4.0], [-3.0, -1.0, -2.0, -5.0, -4.0]),  # perfect inverse
])
def test_spearman_against_ranks_and_pearson_by_hand(x, y):
    rx, ry = _mid_ranks(x), _mid_ranks(y)
    n = len(x)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    r = cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    got = stats.spearman(x, y)
    assert got.n == n and got.rho == pytest.approx(r, abs=1e-12)
    if abs(r) < 1:
        t = r * math.sqrt((n - 2) / (1 - r * r))
        assert got.pvalue == pytest.approx(2 * sps.t.sf(abs(t), n - 2), rel=1e-9)
    else:
        assert got.pvalue == pytest.approx(0.0, abs=1e-12)


def test_spearman_without_distinct_values_or_pairs_is_nan():
    assert math.isnan(stats.spearman([1, 1, 1, 1], [1, 2, 3, 4]).rho)
    assert math.isnan(stats.spearman([1, 2], [2, 1]).pvalue)
    got = stats.spearman([1, 2, np.nan, 4, 5], [2, 1, 3, np.nan, 6])
    assert got.n == 3 and got.rho == pytest.approx(0.5)
    with pytest.raises(ValueError):
        stats.spearman([1, 2, 3], [1, 2])


# --- frames confirmatory analysis: linear contrasts, the declared family, the paraphrase-noise test ----


def test_e_minus_d_contrast_equals_a_refit_with_reference_d_and_a_hand_contrast(pilot):
    df, (beta, cov_lz, cov_md) = pilot
    res = stats.fit_gee_logit(df, FORMULA, "item")
    w = stats.treatment_contrast("C(frame, Treatment('N'))", "N", "E", "D")
    assert w == {"C(frame, Treatment('N'))[T.E]": 1.0, "C(frame, Treatment('N'))[T.D]": -1.0}
    got = stats.linear_contrast(res, w)
    # independent 1: the hand-built Mancl-DeRouen covariance and contrast vector (patsy order: 1, D, E, ...)
    L = np.array([0, -1, 1, 0, 0, 0, 0], dtype=float)
    assert got["estimate"] == pytest.approx(L @ beta, abs=1e-6)
    assert got["se"] == pytest.approx(math.sqrt(L @ cov_md @ L), rel=1e-5)
    # independent 2: statsmodels refitted with D as the reference frame (the same model reparametrised)
    refit = stats.gee_table(stats.fit_gee_logit(df, FORMULA.replace("'N'", "'D'"), "item")).set_index("term")
    e = refit.loc["C(frame, Treatment('D'))[T.E]"]
    assert got["estimate"] == pytest.approx(e["estimate"], abs=1e-6)
    assert got["se"] == pytest.approx(e["se"], rel=1e-5) and got["p"] == pytest.approx(e["p"], rel=1e-4)
    # Liang-Zeger instead of Mancl-DeRouen, and the t(G - 1) reference
    lz = stats.linear_contrast(stats.fit_gee_logit(df, FORMULA, "item", cov_type="robust"), w, use_t=True)
    assert lz["se"] == pytest.approx(math.sqrt(L @ cov_lz @ L), rel=1e-5)
    assert lz["df"] == 19 and lz["p"] == pytest.approx(2 * sps.t(19).sf(abs(lz["estimate"] / lz["se"])))
    assert lz["ci_hi"] - lz["estimate"] == pytest.approx(sps.t(19).ppf(0.975) * lz["se"])
    assert stats.use_t_reference(20, 50) and not stats.use_t_reference(60, 50) and not stats.use_t_reference(20, 0)
    with pytest.raises(ValueError, match="no such terms"):
        stats.linear_contrast(res, {"C(frame)[T.X]": 1.0})
    with pytest.raises(ValueError, match="reference against itself"):
        stats.treatment_contrast("f", "N", "N", "N")
    assert stats.treatment_contrast("f", "N", "D", "N") == {"f[T.D]": 1.0}


def test_holm_family_against_multipletests_and_failed_fits_count():
    p = np.array([0.001, 0.04, 0.03, 0.2, 0.012])
    assert stats.holm_family(p) == pytest.approx(multipletests(p, method="holm")[1])
    with_failed = np.array([0.001, np.nan, 0.03, np.nan, 0.012])
    got = stats.holm_family(with_failed)
    expect = multipletests(np.array([0.001, 1.0, 0.03, 1.0, 0.012]), method="holm")[1]
    assert np.isnan(got[[1, 3]]).all() and got[[0, 2, 4]] == pytest.approx(expect[[0, 2, 4]])
    # the family size is 5, not 3: the smallest p is multiplied by 5
    assert got[0] == pytest.approx(0.005) and stats.holm(with_failed)[0] == pytest.approx(0.003)
    with pytest.raises(ValueError, match="empty"):
        stats.holm_family([])


def _two_by_two(cells):
    """cells: {(item, frame, paraphrase): list of 0/1 decodes} -> long rows."""
    return pd.DataFrame([{"item": i, "frame": f, "paraphrase": r, "y": float(v)}
                         for (i, f, r), ys in cells.items() for v in ys])


def test_paraphrase_contrasts_by_hand():
    df = _two_by_two({("i", "E", "A"): [1, 1], ("i", "E", "B"): [1, 0], ("i", "N", "A"): [0, 0], ("i", "N", "B"): [1, 1],
                      ("j", "E", "A"): [1, 1], ("j", "E", "B"): [1, 1], ("j", "N", "A"): [0, 1], ("j", "N", "B"): [0, 0]})
    got = stats.paraphrase_contrasts(df, "item", "frame", "paraphrase", "y", [("E", "N")]).set_index("item")["delta_p"]
    # i: ((1 - 0.5) + (0 - 1)) / 2 = -0.25 ; j: ((1 - 1) + (0.5 - 0)) / 2 = 0.25
    assert got.to_dict() == {"i": pytest.approx(-0.25), "j": pytest.approx(0.25)}
    with pytest.raises(ValueError, match="not both found"):
        stats.paraphrase_contrasts(df, "item", "frame", "paraphrase", "y", [("E", "D")])


def test_paraphrase_noise_test_margin_in_mean_square_by_hand_and_clusters_widen_it():
    rng = np.random.default_rng(3)
    f = 0.3 + rng.normal(0, 0.1, 30)
    q = rng.normal(0, 0.1, 30)
    t = stats.paraphrase_noise_test(f, q, [f"i{k}" for k in range(30)], 2000, 0)
    assert t.margin == pytest.approx((f ** 2).mean() - (q ** 2).mean()) and t.frame == pytest.approx((f ** 2).mean())
    assert t.beyond and t.lo > 0 and t.pvalue < 0.001 and t.n_clusters == 30
    # one item per cluster: the one-sample t test of d_i = F_i^2 - P_i^2 (scipy)
    ref = sps.ttest_1samp(f ** 2 - q ** 2, 0.0)
    assert t.pvalue == pytest.approx(ref.pvalue) and (t.lo, t.hi) == pytest.approx(tuple(ref.confidence_interval(0.95)))
    # the same 15 items twice: as 30 independent items the CI is too narrow; sharing a cluster id fixes it
    f2, q2 = np.tile(f[:15], 2), np.tile(q[:15], 2)
    naive = stats.paraphrase_noise_test(f2, q2, list(range(30)), 2000, 0)
    clustered = stats.paraphrase_noise_test(f2, q2, list(range(15)) * 2, 2000, 0)
    assert clustered.n_clusters == 15 and clustered.hi - clustered.lo > 1.3 * (naive.hi - naive.lo)
    # swings of random sign: mean P is ~0 but each item moves by ~0.5 under rewording, more than the frame's 0.3
    swing = rng.choice([-0.5, 0.5], 30)
    assert abs(swing.mean()) < 0.2 and not stats.paraphrase_noise_test(f, swing, list(range(30)), 2000, 0).beyond
    equal = stats.paraphrase_noise_test(q, -q, list(range(30)), 2000, 0)   # equal magnitudes
    assert not equal.beyond and equal.margin == 0


def _four_cells(rng, frame, swing, decodes):
    """Per item the observed (Delta_F_i, Delta_P_i) of four cells of ``decodes`` Bernoulli replies around 0.5."""
    prob = {(a, b): np.clip(0.5 + a * frame / 2 + b * swing / 2, 0, 1) for a in (1, -1) for b in (1, -1)}
    y = {k: rng.binomial(decodes, v) / decodes for k, v in prob.items()}
    return ((y[1, 1] - y[-1, 1] + y[1, -1] - y[-1, -1]) / 2, (y[1, 1] - y[1, -1] + y[-1, 1] - y[-1, -1]) / 2)


def test_noise_statistic_is_unbiased_under_decode_noise_for_a_concentrated_frame():
    """Effects on a few items: +0.8 on a quarter of the items against +-0.22 rewording swings on every item, 3 decodes per
    cell. The noise statistic's mean over 400 tables equals the TRUE comparison (mean F^2 - mean P^2 =
    0.16 - 0.0484) within Monte Carlo error; the earlier mean-|.| statistic is pushed up by decode noise
    (an item with F = 0 shows E|e| ~ 0.23), which this test catches (seen failing with it restored)."""
    rng = np.random.default_rng(11)
    n, reps = 120, 400
    frame = np.where(np.arange(n) < n // 4, 0.8, 0.0)
    swing = np.where(np.arange(n) % 2 == 0, 0.22, -0.22)
    truth = (frame ** 2).mean() - (swing ** 2).mean()
    margins = []
    for r in range(reps):
        df, dp = _four_cells(rng, frame, swing, 3)
        margins.append(stats.paraphrase_noise_test(df, dp, np.arange(n), 10, r).margin)
    margins = np.asarray(margins)
    assert abs(margins.mean() - truth) < 4 * margins.std(ddof=1) / np.sqrt(reps)
    # and the same for the mirror shape at the mean-square boundary: a uniform frame against a swing on a quarter
    frame = np.full(n, 0.2)
    swing = np.where(np.arange(n) < n // 4, 0.4, 0.0) * np.where(np.arange(n) % 2 == 0, 1, -1)
    margins = np.asarray([stats.paraphrase_noise_test(*_four_cells(rng, frame, swing, 3), np.arange(n), 10, r).margin
                          for r in range(reps)])
    assert abs(margins.mean()) < 4 * margins.std(ddof=1) / np.sqrt(reps)


def test_decode_noise_variance_by_hand():
    df = _two_by_two({("i", "E", "A"): [1, 0, 1], ("i", "E", "B"): [1, 1, 1], ("i", "N", "A"): [0, 0, 1],
                      ("i", "N", "B"): [0, 1]})
    got = stats.decode_noise_variance(df, "item", "frame", "paraphrase", "y", [("E", "N")]).iloc[0]
    v = lambda x: np.var(x, ddof=1) / len(x)  # noqa: E731
    assert got["noise_var"] == pytest.approx((v([1, 0, 1]) + 0 + v([0, 0, 1]) + v([0, 1])) / 4)


def test_noise_criterion_grid_size_power_and_the_issue_case():
    """The criterion's size over the grid (frame effect 0..0.8 x random-sign swing SD 0..0.9) at the default
    run's n (36 items, 3 decodes; 19 non-harmful): at most 5 % wherever the true mean-square frame effect is
    no larger than the true mean-square swing; power rises with the frame effect; the default run's shape (36 items x
    7 decodes, frame 0.30, swing SD 0.5) is never beyond."""
    for n in (36, 19):
        g = stats.simulate_noise_grid(n, 3, reps=400, seed=n, family_size=33)
        assert len(g) == len(stats.FRAME_EFFECTS) * len(stats.SWING_SDS) and g["null"].sum() >= 40
        assert g.loc[g["null"], "rate_beyond"].max() <= 0.05
        flat = g[g["swing_sd"] == 0].set_index("frame_effect")
        assert flat.loc[0.6, "rate_detect"] >= 0.9 and flat.loc[0.0, "rate_detect"] == 0
        assert (g["rate_detect"] <= g["rate_beyond"]).all() and (g["rate_detect"] <= g["rate_significant"]).all()
        assert g.loc[g["frame_effect"] == 0, "rate_significant"].max() <= 0.05 / 33 + 0.02
    case = stats.simulate_noise_grid(36, 7, frame_effects=[0.30, 0.25], swing_sds=[0.5, 0.6], reps=200, seed=1)
    assert case["null"].all() and case["rate_beyond"].max() <= 0.05
    with pytest.raises(ValueError, match="frame_share must be in"):
        stats.simulate_noise_grid(10, 3, frame_share=0.0)


def test_noise_criterion_size_at_the_paper_roster_n():
    """At the paper roster's 480 items x 7 decodes (the null cells nearest the boundary, where size is largest)."""
    g = stats.simulate_noise_grid(480, 7, frame_effects=[0.0, 0.1, 0.2, 0.3], swing_sds=[0.0, 0.15, 0.3, 0.4],
                                  reps=100, seed=4)
    assert g["null"].sum() >= 6 and g.loc[g["null"], "rate_beyond"].max() <= 0.05
    assert g.set_index(["frame_effect", "swing_sd"]).loc[(0.2, 0.0), "rate_beyond"] == 1.0


def test_min_detectable_and_swing_column_by_hand():
    grid = pd.DataFrame({"frame_effect": [0.0, 0.2, 0.4, 0.0, 0.2, 0.4], "swing_sd": [0.0] * 3 + [0.3] * 3,
                         "rate_detect": [0.0, 0.6, 1.0, 0.0, 0.1, 0.5]})
    assert stats.min_detectable(grid, 0.0) == pytest.approx(0.2 + 0.2 * (0.8 - 0.6) / (1.0 - 0.6))   # 0.28
    assert np.isnan(stats.min_detectable(grid, 0.3))
    assert stats.swing_column(grid, 0.0) == 0.0 and stats.swing_column(grid, 0.25) == 0.3
    assert stats.swing_column(grid, 0.9) == 0.3


def test_reversals_by_hand():
    d = pd.DataFrame({"model": "m", "item": list("abcd"), "delta": [0.5, 0.25, -0.25, 0.0],
                      "delta_a": [0.5, 0.5, -0.25, 0.25], "delta_b": [0.5, 0.0, -0.25, -0.25]})
    r = stats.reversals(d, ["model"]).iloc[0]
    assert (r["n_items"], r["n_reversed"], r["n_paraphrase_flips"]) == (4, 1, 1)
    assert r["mean_delta"] == pytest.approx(0.125)


def test_wald_reference_chi2_or_f_against_scipy(pilot):
    df, _ = pilot
    w = stats.wald_terms(stats.fit_gee_logit(df, FORMULA, "item"), r"C\(frame.*\]$")
    assert stats.wald_reference(w, 20, False) == ("chi2(2)", w.pvalue)
    dist, p = stats.wald_reference(w, 20, True)
    assert dist == "F(2,19)" and p == pytest.approx(sps.f.sf(w.chi2 / 2, 2, 19)) and p > w.pvalue
