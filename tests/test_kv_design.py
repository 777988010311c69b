"""The kv study's design (conditions x policies) and its statistics over synthetic stage tables."""
import pandas as pd
import pytest

from refusal_audit.studies.kv import Params as KvParams
from refusal_audit.studies.kv import analysis as kv_analysis
from refusal_audit.studies.kv import design as kv


def test_conditions_and_policies_follow_the_protocol():
    p = KvParams(model="m", filler_tokens=2048, filler_ablation=[0, 512, 2048], sink=4, sink_ablation=[4, 64, 128])
    conds = kv.conditions(p, {"harmful", "harmful_official", "mmlu"})
    assert [(c.role, c.filler_tokens, c.system_prompt) for c in conds] == [
        ("harmful", 2048, True), ("harmful", 0, True), ("harmful", 512, True), ("harmful", 2048, False),
        ("harmful_official", 2048, True), ("mmlu", 2048, True)]
    main = kv.policies(p, "harmful", 2048, True)
    assert [(x.name, x.sink) for x in main] == [("full", 0), ("sink_tail", 4), ("sink_tail", 64),
                                                ("sink_tail", 128), ("snapkv", 0)]
    assert all(x.keep_ratio == 0.3 for x in main[1:])
    assert [x.name for x in kv.policies(p, "harmful", 512, True)] == ["full", "sink_tail"]
    assert [x.name for x in kv.policies(p, "mmlu", 2048, True)] == ["full", "sink_tail", "snapkv"]


def synthetic():
    """10 items; keyword refuses all under full and 4 under sink_tail; the llm judge refuses all."""
    gens = pd.DataFrame([
        {"generation_id": f"{pol}-{i}", "item_id": f"i{i}", "model": "m", "role": "harmful", "filler_tokens": 100,
         "system_prompt": True, "policy": pol, "sink": 0 if pol == "full" else 4, "keep_ratio": 0.3}
        for pol in ("full", "sink_tail") for i in range(10)])
    rows = []
    for _, g in gens.iterrows():
        kw = g["policy"] == "full" or int(g["item_id"][1:]) < 4
        rows.append({"generation_id": g["generation_id"], "judge": "keyword", "kind": "refusal",
                     "label": "refusal" if kw else "non_refusal", "score": float(kw)})
        rows.append({"generation_id": g["generation_id"], "judge": "llm_harmbench", "kind": "harmful",
                     "label": "not_harmful", "score": 0.1})
    rows[-1]["label"] = "unparseable"
    return gens, pd.DataFrame(rows)


def test_rates_and_paired_drops_from_tables():
    gens, judgments = synthetic()
    out = kv_analysis.outcomes(gens, judgments, primary_sink=4)
    rates = kv_analysis.refusal_rates(out, 0.05).set_index(["judge", "arm"])
    assert rates.loc[("keyword", "full"), "rate"] == 1.0
    assert rates.loc[("keyword", "sink_tail"), "rate"] == 0.4
    assert rates.loc[("llm_harmbench", "sink_tail"), ["n", "unparseable"]].tolist() == [9, 1]
    drops = kv_analysis.paired_drops(out, 500, 0, 0.05).set_index("judge")
    assert drops.loc["keyword", ["only_baseline", "only_arm"]].tolist() == [6, 0]
    assert drops.loc["keyword", "drop"] == pytest.approx(0.6)
    assert drops.loc["llm_harmbench", "mcnemar_p"] == 1.0


def test_mmlu_scoring():
    gens = pd.DataFrame({"generation_id": ["a", "b"], "item_id": ["m1", "m1"], "role": "mmlu",
                         "policy": ["full", "sink_tail"], "sink": [0, 4], "reply": ["B", "C"]})
    items = pd.DataFrame({"item_id": ["m1"], "answer": ["B"], "category": ["abstract_algebra"]})
    scored = kv_analysis.mmlu_scores(gens, items, 4)
    assert scored.set_index("arm")["correct"].to_dict() == {"full": True, "sink_tail": False}
