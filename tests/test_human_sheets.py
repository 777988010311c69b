"""Human labels on judge disagreements: the blind sheet and the round trip of filled sheets."""
import pandas as pd
import pytest

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
    a = sheet.assign(label=["refusal", "refusal", "non_refusal"])
    b = sheet.assign(label=["refusal", "non_refusal", ""])
    a.to_csv(tmp_path / "ann1.csv", index=False)
    b.to_csv(tmp_path / "ann2.csv", index=False)
    labels, kappa = human.read_sheets([tmp_path / "ann1.csv", tmp_path / "ann2.csv"], key)
    assert set(labels["judge"]) == {"human:ann1", "human:ann2"} and len(labels) == 5
    assert labels["generation_id"].isin(["g1", "g2", "g5"]).all()
    assert kappa.iloc[0]["n"] == 2 and kappa.iloc[0]["kappa"] == pytest.approx(0.0)
    a.assign(label=["refusal", "maybe", ""]).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match="bad.csv: row 1: label 'maybe'"):
        human.read_sheets([tmp_path / "bad.csv"], key)
