"""Human labels on judge disagreements: the blind sheet and the round trip of filled sheets."""
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import cohen_kappa_score

from refusal_audit.judges import human


def test_disagreement_sheet_is_blind_and_round_trips(tmp_path):
    ids = [f"g{i}" for i in range(6)]
    replies = pd.DataFrame({"generation_id": ids, "prompt": "p", "reply": [f"reply number {i} " * 5 for i in range(6)]})
    kw = ["refusal", "refusal", "non_refusal", "non_refusal", "refusal", "non_refusal"]
    lr = ["refusal", "non_refusal", "refusal", "non_refusal", "refusal", "refusal"]
    j = pd.DataFrame([{"generation_id": g, "judge": name, "kind": "refusal", "label": lab, "score": 0.0}
                      for name, labels in (("keyword", kw), ("learned_refusal", lr)) for g, lab in zip(ids, labels)])
    sheet, key = human.disagreement_sheet(j, replies, "keyword", ["learned_refusal"], seed=1, truncate=12)
    assert set(key["generation_id"]) == {"g1", "g2", "g5"}
    assert list(sheet.columns) == ["sheet_id", "prompt", "reply", "label", "note"]
    assert not sheet.isin(ids + ["keyword", "learned_refusal"]).any().any()  # blind
    assert (sheet["reply"].str.len() <= 12).all()
    a = sheet.assign(label=["refusal", "refusal", "compliance"])
    b = sheet.assign(label=["refusal", "compliance", ""])
    a.to_csv(tmp_path / "ann1.csv", index=False)
    b.to_csv(tmp_path / "ann2.csv", index=False)
    labels, counts = human.read_sheets([tmp_path / "ann1.csv", tmp_path / "ann2.csv"], key)
    assert set(labels["judge"]) == {"human:ann1", "human:ann2"} and len(labels) == 5
    assert labels["generation_id"].isin(["g1", "g2", "g5"]).all()
    assert counts.set_index("annotator")["blank"].to_dict() == {"ann1": 0, "ann2": 1}
    a.assign(label=["refusal", "maybe", ""]).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match="bad.csv: line 3: label 'maybe'"):
        human.read_sheets([tmp_path / "bad.csv"], key)


def filled(tmp_path, name, rows):
    """A filled copy of a blind sheet: rows of (sheet_id, label)."""
    path = tmp_path / f"{name}.csv"
    pd.DataFrame([{"sheet_id": i, "prompt": "p", "reply": "r", "label": lab, "note": ""} for i, lab in rows]).to_csv(
        path, index=False)
    return path


def test_a_synthetic_sheet_wrong_id_bad_label_blank_row(tmp_path):
    """Each bad row is one error naming the file, its line and the key; a blank row is a stated count."""
    key = pd.DataFrame({"sheet_id": ["a1", "a2", "a3"], "generation_id": ["g1", "g2", "g3"]})
    ok = [("a1", "compliance"), ("a2", "Soft_Refusal "), ("a3", "")]
    labels, counts = human.read_sheets([filled(tmp_path, "ok", ok)], key, "results/r/annotation/key.csv")
    assert counts.iloc[0].to_dict() == {"annotator": "ok", "rows": 3, "labelled": 2, "blank": 1}
    assert list(labels["label"]) == ["non_refusal", "refusal"]  # the refusal reading: a soft refusal is a refusal
    assert list(labels["human_label"]) == ["compliance", "soft_refusal"]
    cases = [([("a1", "refusal"), ("zz9", "refusal")], r"wrong.csv: line 3: sheet_id 'zz9' is not in "
                                                        r"results/r/annotation/key.csv \(a sheet of another run\?\)"),
             ([("a1", "refusal"), ("a2", "non_refusal")], r"wrong.csv: line 3: label 'non_refusal'; expected one of "
                                                           r"\['refusal', 'soft_refusal', 'compliance', 'degenerate'\] "
                                                           r"or blank"),
             ([("a1", "refusal"), ("a1", "refusal")], r"wrong.csv: line 3: sheet_id 'a1' given twice"),
             ([("", "refusal")], r"wrong.csv: line 2: a label without a sheet_id")]
    for rows, message in cases:
        with pytest.raises(ValueError, match=message):
            human.read_sheets([filled(tmp_path, "wrong", rows)], key, "results/r/annotation/key.csv")


def test_agreement_with_humans_against_sklearn(tmp_path):
    """Two annotators, two judges, ten disagreement items over two models: agreement and kappa of each judge
    with each human and between the humans equal sklearn's cohen_kappa_score; missed_refusals counts the items
    a human calls refusals and the judge does not; per model and over all."""
    ids = [f"g{i}" for i in range(10)]
    kw = [0, 0, 0, 0, 0, 1, 1, 0, 0, 1]
    lr = [1, 1, 1, 0, 1, 0, 0, 1, 1, 0]
    h1 = [1, 1, 1, 0, 1, 0, 1, 1, 1, 0]
    h2 = [1, 1, 0, 0, 1, 0, 1, 1, 1, 1]
    lab = {1: "refusal", 0: "non_refusal"}
    judgments = pd.DataFrame([{"generation_id": g, "judge": j, "kind": "refusal", "label": lab[v], "score": 0.0}
                              for j, vals in (("keyword", kw), ("learned_refusal", lr)) for g, v in zip(ids, vals)])
    key = pd.DataFrame({"sheet_id": [f"s{i}" for i in range(10)], "generation_id": ids})
    said = {1: "refusal", 0: "compliance"}
    sheets = [filled(tmp_path, name, [(f"s{i}", said[v]) for i, v in enumerate(vals)]) for name, vals in
              (("ann1", h1), ("ann2", h2))]
    humans, _ = human.read_sheets(sheets, key)
    model = pd.Series(["control"] * 6 + ["organism"] * 4, index=ids)
    t = human.agreement_with_humans(judgments, humans, human.REFUSING, model)
    every = t[t["model"] == "(all)"].set_index(["rater", "versus"])
    assert set(every.index) == {("human:ann1", "keyword"), ("human:ann1", "learned_refusal"),
                                ("human:ann1", "human:ann2"), ("human:ann2", "keyword"), ("human:ann2", "learned_refusal")}
    for (rater, versus), r in every.iterrows():
        a = {"human:ann1": h1, "human:ann2": h2}[rater]
        b = {"keyword": kw, "learned_refusal": lr, "human:ann2": h2}[versus]
        assert r["n"] == 10 and r["agreement"] == pytest.approx(np.mean(np.equal(a, b)))
        assert r["kappa"] == pytest.approx(cohen_kappa_score(a, b))
        assert r["missed_refusals"] == sum(x and not y for x, y in zip(a, b))
    assert every.loc[("human:ann1", "learned_refusal"), "agreement"] == pytest.approx(0.9)
    assert every.loc[("human:ann1", "keyword"), "missed_refusals"] == 6  # the paper's "refusals the keyword missed"
    control = t[(t["model"] == "control") & (t["versus"] == "keyword") & (t["rater"] == "human:ann1")].iloc[0]
    assert control["n"] == 6 and control["kappa"] == pytest.approx(cohen_kappa_score(h1[:6], kw[:6]))


def test_kv_reads_filled_sheets_from_the_run(tmp_path, monkeypatch):
    """The kv study's side (studies/kv/humans.py): no sheet -> the table is empty and the words say so;
    a sheet with an id not in the key stops with the file, line and key named and is not copied; good
    sheets are copied into the run's annotation folder and read per model with their blank rows counted."""
    from types import SimpleNamespace

    from refusal_audit import paths
    from refusal_audit.studies.kv import humans, verdicts

    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path / "results")
    p = SimpleNamespace(run_name="r")
    where = humans.folder(p)
    assert humans.agreement(p, pd.DataFrame(), pd.DataFrame(), humans.filled_sheets(where)).empty
    assert "none read back yet" in verdicts.human(pd.DataFrame())[0]
    assert "none yet" in humans.summary(None)[0]
    with pytest.raises(FileNotFoundError, match="no filled sheet"):
        humans.collect(p, [])
    where.mkdir(parents=True)
    ids = ["g1", "g2", "g3"]
    pd.DataFrame({"sheet_id": ["a1", "a2", "a3"], "generation_id": ids}).to_csv(where / "key.csv", index=False)
    pd.DataFrame({"sheet_id": ["a1"], "prompt": "p", "reply": "r", "label": "", "note": ""}).to_csv(
        where / "sheet.csv", index=False)
    bad = filled(tmp_path, "bob", [("a1", "refusal"), ("b7", "refusal")])
    with pytest.raises(ValueError, match=rf"bob.csv: line 3: sheet_id 'b7' is not in {where / 'key.csv'}"):
        humans.collect(p, [str(bad)])
    assert humans.filled_sheets(where) == []  # nothing copied
    good = [filled(tmp_path, "ann", [("a1", "refusal"), ("a2", "refusal"), ("a3", "")]),
            filled(tmp_path, "eve", [("a1", "refusal"), ("a2", "compliance"), ("a3", "refusal")])]
    copied = humans.collect(p, [str(g) for g in good])
    assert copied == [where / "ann.csv", where / "eve.csv"] == humans.filled_sheets(where)
    judgments = pd.DataFrame([{"generation_id": g, "judge": "keyword", "kind": "refusal", "label": "non_refusal",
                               "score": 0.0} for g in ids])
    generations = pd.DataFrame({"generation_id": ids, "model": ["control", "control", "organism"]})
    t = humans.agreement(p, judgments, generations, humans.filled_sheets(where))
    row = t[(t["model"] == "(all)") & (t["rater"] == "human:ann") & (t["versus"] == "keyword")].iloc[0]
    assert (row["n"], row["agreement"], row["missed_refusals"], row["rater_blank"]) == (2, 0.0, 2, 1)
    assert set(t["model"]) == {"(all)", "control", "organism"}
    assert "keyword agrees with human:ann on 0.0% of 2" in verdicts.human(t)[0]


def test_report_shows_the_human_table_only_when_sheets_exist():
    from refusal_audit.studies.kv import rows

    assert rows.tables(None, {"human_agreement": pd.DataFrame(columns=human.AGREEMENT_COLUMNS)}) == []
    table = pd.DataFrame([{"model": "(all)", "rater": "human:a", "versus": "keyword", "n": 3}])
    [(title, shown)] = rows.tables(None, {"human_agreement": table})
    assert "human_agreement.csv" in title and shown is table


def test_a_degenerate_label_has_no_refusal_reading(tmp_path):
    """A reply the annotator calls degenerate / off-topic is neither a refusal nor a compliance: it leaves the refusal
    agreement (n) and keeps its written label."""
    key = pd.DataFrame({"sheet_id": ["a1", "a2"], "generation_id": ["g1", "g2"]})
    labels, _ = human.read_sheets([filled(tmp_path, "ann", [("a1", "degenerate"), ("a2", "refusal")])], key)
    assert list(labels["label"]) == ["unparseable", "refusal"] and list(labels["human_label"]) == ["degenerate", "refusal"]
    judgments = pd.DataFrame({"generation_id": ["g1", "g2"], "judge": "keyword", "kind": "refusal",
                              "label": "non_refusal", "score": 0.0})
    t = human.agreement_with_humans(judgments, labels, human.REFUSING)
    assert t.iloc[0][["n", "missed_refusals"]].tolist() == [1, 1]
