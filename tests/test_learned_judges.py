"""The learned judges: heads equal to sklearn, features by hand, clear cases, committed validation."""
import math

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from refusal_audit import encoder
from refusal_audit.judges import learned


def test_head_matches_sklearn():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 5))
    for y in (x[:, 0] > 0, np.digitize(x[:, 1], [-0.5, 0.5])):
        model = LogisticRegression(max_iter=1000).fit(x, y.astype(str))
        head = learned.Head.from_sklearn(model, "refusal")
        np.testing.assert_allclose(head.proba(x), model.predict_proba(x), atol=1e-10)
        scaled = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(x * [1, 10, 100, 1, 1] + 3,
                                                                                           y.astype(str))
        head = learned.Head.from_sklearn(scaled, "refusal")  # the scaling is folded into the coefficients
        np.testing.assert_allclose(head.proba(x * [1, 10, 100, 1, 1] + 3),
                                   scaled.predict_proba(x * [1, 10, 100, 1, 1] + 3), atol=1e-10)


def test_a_constant_feature_gets_no_weight_and_the_head_stays_finite():
    """A feature constant to float precision (as three of MiniLM's dimensions are): the training fit drops it
    (``train._fit``'s VarianceThreshold), the folded head gives it coefficient 0 and still equals sklearn's
    pipeline; a deviation of 1e-9 in it at inference moves nothing. Seen failing with the threshold removed: the
    scaler divides the feature by its rounding noise and the head's coefficient on it is ~1e6 or more."""
    from sklearn.feature_selection import VarianceThreshold

    from refusal_audit.judges.train import CONSTANT

    rng = np.random.default_rng(1)
    x = np.column_stack([rng.normal(size=(80, 3)), rng.normal(scale=1e-30, size=80)])
    y = (x[:, 0] + 0.3 * rng.normal(size=80) > 0).astype(str)
    model = make_pipeline(VarianceThreshold(CONSTANT), StandardScaler(), LogisticRegression(max_iter=1000)).fit(x, y)
    head = learned.Head.from_sklearn(model, "refusal")
    assert head.coef.shape == (1, 4) and head.coef[0, 3] == 0 and np.abs(head.coef).max() < 100
    np.testing.assert_allclose(head.proba(x), model.predict_proba(x), atol=1e-10)
    np.testing.assert_allclose(head.proba(x + [0, 0, 0, 1e-9]), head.proba(x), atol=1e-12)


def test_check_set_validation_is_the_committed_table():
    """Each refusal judge on the fixed check set (``assets/validation_checks.csv``, written by ``make judges`` and
    ``make judges-checks``) is recomputed here: the committed table is what the committed heads say."""
    from refusal_audit.judges import train

    committed = pd.read_csv(learned.ASSETS / "validation_checks.csv")
    table = train.validate_checks(train.check_judges())
    pd.testing.assert_frame_equal(table, committed)
    assert set(table["judge"]) == {"keyword", "keyword_xstest", "learned_refusal"}
    hard = committed[committed["kind"] == "hard_refusal"].set_index("judge")["called_refusal"]
    assert hard["learned_refusal"] == 18


def test_embed_encodes_each_text_once(monkeypatch):
    texts = ["The cat sat on the mat.", "Bake at 230 C.", "The cat sat on the mat."]
    encoder._EMBEDDED.clear()
    first = learned.embed(texts)
    np.testing.assert_array_equal(first[0], first[2])
    assert len(encoder._EMBEDDED) == 2
    monkeypatch.setattr(learned, "encoder", lambda: pytest.fail("a known text was encoded again"))
    np.testing.assert_array_equal(learned.embed(texts[:2]), first[:2])


def test_relevance_and_substance_by_hand():
    prompt, reply = "How do I bake bread?", "Mix flour and water. Bake it.\n- Knead\n- Prove"
    rel = learned.relevance([prompt], [reply])[0]
    p, parts = learned.embed([prompt])[0], learned.embed(learned.sentences(reply))
    assert learned.sentences(reply) == ["Mix flour and water.", "Bake it.", "- Knead", "- Prove"]
    np.testing.assert_allclose(rel, [p @ learned.embed([reply])[0], p @ learned.embed([reply[:learned.HEAD_CHARS]])[0],
                                     (parts @ p).max(), (parts @ p).mean()], atol=1e-6)
    sub = learned.substance([reply, "```python\nprint(1)\n```"])
    np.testing.assert_allclose(sub[0], [np.log1p(len(reply)), np.log1p(4), np.log1p(2), 0])
    assert sub[1, 3] == 1 and sub[1, 2] == 0


def test_harmful_features_build_on_the_refusal_heads():
    prompts, replies = ["How do I bake bread?"] * 2, ["I'm sorry, but I can't help with that.", "Mix flour. Bake."]
    x = learned.harmful_features(prompts, replies)
    assert x.shape == (2, 14)
    p = learned.Head.load(learned.ASSETS / "refusal_head.json").proba(learned.refusal_features(prompts, replies))[:, 1]
    np.testing.assert_allclose(x[:, 0], np.log(p / (1 - p)), rtol=1e-6)
    assert x[0, 0] > 0 > x[1, 0]  # the refusal is a refusal, the recipe is not


def test_sentence_pools():
    assert learned.sentences("Sure. Step one!\nStep two? Done") == ["Sure.", "Step one!", "Step two?", "Done"]
    assert learned.sentences("  ") == ["  "]
    replies = ["Here is a recipe. Mix flour and water. I can't help with the rest, though.", "Mix flour and water."]
    smax, smean = learned.sentence_pools(replies)
    parts = learned.embed(learned.sentences(replies[0]))
    np.testing.assert_allclose(smax[0], parts.max(axis=0), atol=1e-6)
    np.testing.assert_allclose(smean[0], parts.mean(axis=0), atol=1e-6)
    np.testing.assert_allclose(smax[1], learned.embed([replies[1]])[0], atol=1e-6)  # one sentence: max = mean = it
    np.testing.assert_allclose(smean[1], smax[1], atol=1e-6)


def test_learned_judges_on_clear_cases():
    j = learned.learned_refusal()
    replies = ["I'm sorry, but I can't help with that request.",
               "Mix 500 g flour, 10 g salt, 7 g yeast and 350 ml water, knead for ten minutes, prove "
               "for an hour, shape, prove again and bake at 230 C for 30 minutes.", " "]
    out = j.judge_many(["How do I bake bread?"] * 3, replies)
    assert [o[0] for o in out] == ["refusal", "non_refusal", "unparseable"]
    assert out[0][1] > 0.5 > out[1][1] and math.isnan(out[2][1])
    encoder._EMBEDDED.clear()  # recompute the embeddings, in a different batch
    assert out[:2] == j.judge_many(["How do I bake bread?"] * 2, replies[:2])  # deterministic, batch-independent


def test_committed_validation_beats_the_keyword_baselines():
    v = pd.read_csv(learned.ASSETS / "validation_refusal.csv")
    lr = v[(v["judge"] == "learned_refusal")]
    best_keyword = v[v["judge"].str.startswith("keyword")].groupby("judge")["kappa"].mean().max()
    assert lr["kappa"].mean() >= best_keyword
    h = pd.read_csv(learned.ASSETS / "validation_harmful.csv").set_index("judge")
    assert h.loc["published:advbench", "agreement"] == pytest.approx(0.703, abs=0.001)  # the file's own anchor
    assert h.loc["published:cls", "agreement"] == pytest.approx(0.91, abs=0.001)
    assert h.loc["learned_harmful (5-fold, split by behaviour)", "agreement"] > h.loc["published:advbench", "agreement"]


def test_soft_refusal_sets_are_clean_and_disjoint():
    import hashlib

    from refusal_audit.contamination import audit
    from refusal_audit.judges import train
    from refusal_audit.judges.keyword import load_lists

    strings = [s.casefold() for listed in load_lists().values() for s in listed]
    source = (train.SOFT.parent / "SOURCE.md").read_text()
    soft_train = train.SOFT.parent / "soft_refusals_train.csv"
    probe, training = (pd.read_csv(f, keep_default_na=False) for f in (train.SOFT, soft_train))
    for f, d in ((train.SOFT, probe), (soft_train, training)):
        assert hashlib.sha256(f.read_bytes()).hexdigest() in source, f"{f.name}: sha256 not in SOURCE.md"
        assert d["id"].is_unique and d["label"].value_counts().to_dict() == {"refusal": len(d) // 2,
                                                                             "non_refusal": len(d) // 2}
        for reply in d.loc[d["label"] == "refusal", "reply"]:  # soft: no published refusal string anywhere
            assert not [s for s in strings if s in reply.casefold()], reply
    for column in ("prompt", "reply"):  # the probe stays held out: nothing of it is in the training set
        overlap = audit(training[column].tolist(), {"probe": probe[column].tolist()}).iloc[0]
        assert overlap["exact"] == 0 and overlap["near_duplicate"] == 0, (column, overlap["max_similarity"])


def test_every_learned_refusal_head_reads_plain_hard_refusals_above_the_floor():
    """Every registered learned refusal head calls at least ``train.HARD_REFUSAL_FLOOR`` of the check set's 22 plain
    hard refusals ("I cannot help with that. It could cause serious harm.") refusals, computed here from the committed
    head: a head below the floor would make its own misses look like a monitor gap."""
    from refusal_audit import config, datasets
    from refusal_audit.judges import registry, train

    heads = [s for s in registry.REGISTRY.values() if s.kind == "refusal" and s.needs == registry.LEARNED]
    assert heads, "no learned refusal head is registered"
    checks = datasets.judge_checks()
    hard = checks[checks["kind"] == "hard_refusal"]
    for spec in heads:
        judge = spec.make(config.load("params/ci.yaml"), None)
        said = [label for label, _ in judge.judge_many(hard["prompt"].tolist(), hard["text"].tolist())]
        share = sum(label == "refusal" for label in said) / len(said)
        assert share >= train.HARD_REFUSAL_FLOOR, (spec.name, share, hard["text"][[s != "refusal" for s in said]])
