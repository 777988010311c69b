"""The policy study's two operational definitions: declared rules, their checks, A/B disagreement."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from refusal_audit.studies.policy import definitions
from refusal_audit.studies.policy import rules as P

# hand-built rows: dataset, metadata, and the class each policy must give (read off the definitions)
HAND = [
    ({"dataset": "harmbench", "FunctionalCategory": "copyright", "BehaviorID": "lyrics_x"}, "HARMFUL", "GENERIC_SAFE"),
    ({"dataset": "harmbench", "FunctionalCategory": "contextual", "BehaviorID": "ctx_x"}, "COMPOUND", "COMPOUND"),
    ({"dataset": "harmbench", "FunctionalCategory": "standard", "BehaviorID": "explicit_pornographic_story"},
     "HARMFUL", "BOUNDARY_SAFE"),
    ({"dataset": "harmbench", "FunctionalCategory": "standard", "BehaviorID": "std_x"}, "HARMFUL", "HARMFUL"),
    ({"dataset": "xstest", "type": "homonyms", "label": "safe"}, "BOUNDARY_SAFE", "BOUNDARY_SAFE"),
    ({"dataset": "xstest", "type": "contrast_homonyms", "label": "unsafe"}, "HARMFUL", "HARMFUL"),
    ({"dataset": "jbb_harmful", "Category": "Expert advice", "Behavior": "AIDS treatment"}, "HARMFUL", "BOUNDARY_SAFE"),
    ({"dataset": "jbb_harmful", "Category": "Expert advice", "Behavior": "Black market organs"}, "HARMFUL", "HARMFUL"),
    ({"dataset": "jbb_benign", "category": "Physical harm", "behavior": "Suicide"}, "HARMFUL", "BOUNDARY_SAFE"),
    ({"dataset": "jbb_benign", "category": "Economic harm", "behavior": "Gambling"}, "BOUNDARY_SAFE", "BOUNDARY_SAFE"),
    ({"dataset": "strongreject", "category": "Violence"}, "HARMFUL", "HARMFUL"),
    ({"dataset": "advbench"}, "HARMFUL", "HARMFUL"),
    ({"dataset": "simplesafetytests", "harm_area": "Scams and fraud"}, "HARMFUL", "HARMFUL"),
    ({"dataset": "openai_moderation", "S": "1", "S3": "0", "H": "0", "SH": ""}, "HARMFUL", "BOUNDARY_SAFE"),
    ({"dataset": "openai_moderation", "S": "1", "S3": "1", "H": "0", "SH": "0"}, "HARMFUL", "HARMFUL"),
    ({"dataset": "openai_moderation", "S": "0", "S3": "0", "H": "0", "SH": ""}, "BOUNDARY_SAFE", "BOUNDARY_SAFE"),
]
MOD_FLAGS = ("S", "H", "V", "HR", "SH", "S3", "H2", "V2")


def hand_pool() -> pd.DataFrame:
    rows = []
    for n, (meta, _, _) in enumerate(HAND):
        row = {"item_id": f"hand-{n}", "prompt": "..."} | meta
        if row["dataset"] == "openai_moderation":
            row = {f: "0" for f in MOD_FLAGS} | row
        rows.append(row)
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def data_pool() -> pd.DataFrame:
    return P.build_pool()


def test_hand_built_rows_get_their_classes(data_pool):
    pool = hand_pool()
    # the real rules are checked against every value of the real sets (the hand rows are a sample);
    # SimpleSafetyTests and the moderation set are outside DEFAULT_DATASETS: their values are listed here
    extra = [{"dataset": "simplesafetytests", "harm_area": a} for a in P.SST_AREAS]
    extra += [{"dataset": "openai_moderation"} | {g: "1" if g == f else "0" for g in MOD_FLAGS} for f in MOD_FLAGS]
    vocabulary = pd.concat([data_pool, pool, pd.DataFrame(extra)], ignore_index=True)
    got = P.apply_policies(pool, vocabulary=vocabulary)
    assert got["label_a"].tolist() == [a for _, a, _ in HAND]
    assert got["label_b"].tolist() == [b for _, _, b in HAND]
    assert got["unsafe_a"].tolist() == [a in ("HARMFUL", "COMPOUND") for _, a, _ in HAND]
    assert got["unsafe_b"].tolist() == [b in ("HARMFUL", "COMPOUND") for _, _, b in HAND]
    assert got.loc[2, "rule_b"] == "B03" and got.loc[3, "rule_b"] == "B04"  # item rule before category rule


def test_the_pool_from_data_is_labelled_in_full(data_pool):
    got = P.apply_policies(data_pool)
    assert len(got) == 1883 and got["item_id"].is_unique
    assert set(got["label_a"]) | set(got["label_b"]) <= set(P.CLASSES)
    sizes = got.groupby("dataset").size().to_dict()
    assert sizes == {"harmbench": 400, "xstest": 450, "jbb_harmful": 100, "jbb_benign": 100,
                     "strongreject": 313, "advbench": 520}
    # copyright: the moderator blocks it, the intent reading does not
    copyright_rows = got[got["FunctionalCategory"] == "copyright"]
    assert (copyright_rows["label_a"] == "HARMFUL").all() and (copyright_rows["label_b"] == "GENERIC_SAFE").all()
    xs = got[got["dataset"] == "xstest"]
    b_stricter = xs["type"].isin(["privacy_fictional", "real_group_nons_discr"])
    assert (xs.loc[~b_stricter, "label_a"] == xs.loc[~b_stricter, "label_b"]).all()
    assert (xs.loc[b_stricter, "label_a"] == "BOUNDARY_SAFE").all() and (xs.loc[b_stricter, "label_b"] == "HARMFUL").all()
    assert b_stricter.sum() == 50
    assert ((xs["label"] == "safe") == (xs["label_a"] == "BOUNDARY_SAFE")).all()
    # every rule of a set in data/ labels at least one row
    for policy in P.POLICIES:
        used = set(got[f"rule_{policy.key}"])
        for i, rule in enumerate(policy.rules):
            if rule.dataset in sizes:
                assert policy.rule_id(i) in used, (policy.name, policy.rule_id(i))


def test_a_row_no_rule_labels_stops():
    pool = pd.DataFrame({"item_id": ["x1", "x2", "x3"], "dataset": "xstest",
                         "type": ["homonyms", "contrast_homonyms", "definitions"]})
    policy = P.Policy("a", "toy", "?", (P.R("xstest", "type", "homonyms", "BOUNDARY_SAFE", ""),
                                         P.R("xstest", "type", "contrast_homonyms", "HARMFUL", "")))
    with pytest.raises(P.RuleError, match=r"1 row\(s\) that no rule labels, first pool row 2 \(dataset 'xstest', "
                                          r"item 'x3', metadata \{'type': 'definitions'"):
        P.apply_policies(pool, (policy,))
    other = pd.DataFrame({"item_id": ["y"], "dataset": ["advbench"]})
    with pytest.raises(P.RuleError, match="no rule labels.*'advbench'"):
        P.apply_policies(pd.concat([pool.iloc[:2], other], ignore_index=True), (policy,))


@pytest.mark.parametrize("rule, message", [
    (("xstest", "type", "homonym", "HARMFUL"),
     r"rule A01 \(xstest: type\): value\(s\) \['homonym'\] occur in no 'xstest' row"),
    (("xstest", "Type", "homonyms", "HARMFUL"), r"rule A01 \(xstest: Type\): no metadata field 'Type'"),
    (("jbb_benign", "Category", "Privacy", "HARMFUL"), r"field 'Category' has no value in dataset 'jbb_benign'"),
])
def test_a_rule_that_matches_nothing_stops(rule, message):
    pool = pd.DataFrame({"item_id": ["x1", "j1", "b1"], "dataset": ["xstest", "jbb_harmful", "jbb_benign"],
                         "type": ["homonyms", None, None], "Category": [None, "Privacy", None],
                         "category": [None, None, "Privacy"]})
    rules = (P.R(*rule, ""), P.R("xstest", None, (), "BOUNDARY_SAFE", ""),
             P.R("jbb_harmful", None, (), "HARMFUL", ""), P.R("jbb_benign", None, (), "BOUNDARY_SAFE", ""))
    with pytest.raises(P.RuleError, match=message):
        P.apply_policies(pool, (P.Policy("a", "toy", "?", rules),))


def test_a_malformed_rule_stops_when_declared():
    with pytest.raises(P.RuleError, match="unknown dataset 'xtest'"):
        P.R("xtest", "type", "homonyms", "HARMFUL", "")
    with pytest.raises(P.RuleError, match="label 'UNSAFE' is not one of"):
        P.R("xstest", "type", "homonyms", "UNSAFE", "")
    with pytest.raises(P.RuleError, match="a field and its values, or neither"):
        P.R("xstest", "type", (), "HARMFUL", "")


def test_disagreement_by_hand():
    lab = pd.DataFrame({
        "dataset": ["d1", "d1", "d1", "d2", "d2"],
        "label_a": ["HARMFUL", "HARMFUL", "BOUNDARY_SAFE", "GENERIC_SAFE", "COMPOUND"],
        "label_b": ["HARMFUL", "GENERIC_SAFE", "BOUNDARY_SAFE", "BOUNDARY_SAFE", "COMPOUND"],
    })
    lab["unsafe_a"] = lab["label_a"].isin(["HARMFUL", "COMPOUND"])
    lab["unsafe_b"] = lab["label_b"].isin(["HARMFUL", "COMPOUND"])
    d = P.disagreement(lab).set_index("class")
    assert d.loc["4-class", "disagree_either"] == 2 / 5 and d.loc["binary", "disagree_either"] == 1 / 5
    assert d.loc["HARMFUL", ["n_a", "n_b", "n_both"]].tolist() == [2, 1, 1]
    assert d.loc["HARMFUL", ["disagree_a", "disagree_b", "disagree_either"]].tolist() == [0.5, 0.0, 0.5]
    assert d.loc["GENERIC_SAFE", ["disagree_a", "disagree_b", "disagree_either"]].tolist() == [1.0, 1.0, 1.0]
    assert d.loc["BOUNDARY_SAFE", ["disagree_a", "disagree_b", "disagree_either"]].tolist() == [0.0, 0.5, 0.5]
    assert d.loc["COMPOUND", ["disagree_a", "disagree_b", "disagree_either"]].tolist() == [0.0, 0.0, 0.0]
    by = P.disagreement(lab, by="dataset").set_index(["dataset", "class"])
    assert by.loc[("d1", "4-class"), "disagree_either"] == 1 / 3
    assert by.loc[("d2", "binary"), "disagree_either"] == 0.0
    # a class no row of the group carries: NaN, not a division by zero
    assert np.isnan(by.loc[("d2", "HARMFUL"), "disagree_a"]) and np.isnan(by.loc[("d2", "HARMFUL"), "disagree_either"])
    ct = P.crosstab(lab)
    assert ct.loc["HARMFUL", "GENERIC_SAFE"] == 1 and int(ct.to_numpy().sum()) == 5


def test_definitions_md_matches_the_rules_and_the_data(data_pool):
    text = definitions.DEFINITIONS.read_text()
    assert definitions.definitions_text(text, P.apply_policies(data_pool)) == text, \
        "DEFINITIONS.md is out of date: run python -m refusal_audit.studies.policy.definitions"
    for q in (P.POLICY_A.question, P.POLICY_B.question):
        assert q in text


def test_the_policy_study_pool_with_simplesafetytests_and_moderation_is_labelled_in_full():
    """The two sets copied into data/ for the policy study and the written set: every row labelled, every
    rule used, the disagreement DEFINITIONS.md states (without the written set 353 of 3,663, 9.6 % binary:
    A stricter on 303, B on 50; 188 of the moderation set's 1,680), over at least three harm categories
    and four benchmarks; the written set's 298 rows add 158 B-stricter rows in two rule pairs."""
    full = P.apply_policies(P.build_pool(include=P.DEFAULT_DATASETS + ("simplesafetytests", "openai_moderation",
                                                                       "written")))
    got = full[full["dataset"] != "written"]
    assert len(got) == 3663 and full["item_id"].is_unique
    assert int((got["label_a"] != got["label_b"]).sum()) == 353
    assert int((got["unsafe_a"] & ~got["unsafe_b"]).sum()) == 303 and int((~got["unsafe_a"] & got["unsafe_b"]).sum()) == 50
    assert round((got["unsafe_a"] != got["unsafe_b"]).mean(), 3) == 0.096
    from refusal_audit.studies.policy import design

    got["benchmark"] = [design.benchmark_of(r) for r in got.to_dict("records")]
    disputed = got[got["unsafe_a"] != got["unsafe_b"]]
    assert disputed["benchmark"].nunique() >= 4 and disputed.groupby(["rule_a", "rule_b"]).ngroups >= 3
    mod = got[got["dataset"] == "openai_moderation"]
    assert len(mod) == 1680 and int((mod["label_a"] != mod["label_b"]).sum()) == 188
    sst = got[got["dataset"] == "simplesafetytests"]
    assert len(sst) == 100 and (sst["label_a"] == "HARMFUL").all() and (sst["label_b"] == "HARMFUL").all()
    w = full[full["dataset"] == "written"]
    assert len(w) == 298 and int((w["unsafe_a"] & ~w["unsafe_b"]).sum()) == 0
    b_str = w[~w["unsafe_a"] & w["unsafe_b"]]
    assert b_str.groupby(["rule_a", "rule_b"]).size().to_dict() == {("A21", "B21"): 116, ("A22", "B22"): 42}
    assert w.groupby(["label_a", "label_b"]).size().to_dict() == {("BOUNDARY_SAFE", "BOUNDARY_SAFE"): 70,
                                                                  ("BOUNDARY_SAFE", "HARMFUL"): 158,
                                                                  ("HARMFUL", "HARMFUL"): 70}
    assert round((full["unsafe_a"] != full["unsafe_b"]).mean(), 3) == 0.129  # 511 of 3,961
    for policy in P.POLICIES:
        used = set(full[f"rule_{policy.key}"])
        assert all(policy.rule_id(i) in used for i in range(len(policy.rules))), policy.name


def test_the_written_set_duplicates_nothing_in_the_pool_or_itself():
    """data/policy_written/: no row an exact or near-duplicate (contamination's MinHash audit, shingle
    Jaccard >= 0.7) of any row of the other eight sets of the default pool, nor of another written row
    (the SOURCE.md's writing rule 6; measured highest Jaccard 0.33 and 0.44)."""
    import itertools

    from refusal_audit import contamination as C

    pool = P.build_pool(include=P.DEFAULT_DATASETS + ("simplesafetytests", "openai_moderation"))
    w = P.build_pool(include=("written",))
    a = C.audit_pool(pd.DataFrame({"id": pool["item_id"], "prompt": pool["prompt"]}),
                     pd.DataFrame({"id": w["item_id"], "prompt": w["prompt"]}))
    assert not a["contaminated"].any() and a["jaccard"].max() < 0.35
    inside = max(C.jaccard(x, y) for x, y in itertools.combinations(w["prompt"], 2))
    assert inside < 0.5 and not w["prompt"].map(C.fingerprint).duplicated().any()
