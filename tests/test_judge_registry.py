"""The judge registry: every judge registered once with its label vocabulary, what it needs and its definition;
params switch judges on; a params key naming an unregistered judge stops with the registered ones named."""
from types import SimpleNamespace

import pytest

from refusal_audit import judges
from refusal_audit.errors import ParamsError
from refusal_audit.judges import registry


def params(learned=True, questions=None):
    llm = SimpleNamespace(model="judge", questions=questions, max_reply_tokens=64) if questions else None
    return SimpleNamespace(judges=SimpleNamespace(learned=learned, llm=llm, keyword=SimpleNamespace(
        list_name="gcg_evaluate_full", match="anywhere", casefold=False)))


def test_every_registered_judge_has_a_known_vocabulary_and_a_definition():
    assert list(registry.REGISTRY)[:3] == ["keyword", "learned_refusal", "learned_harmful"]
    for name, spec in registry.REGISTRY.items():
        assert spec.name == name and spec.kind in judges.LABELS and spec.definition.strip()
        assert spec.needs in (registry.NOTHING, registry.LEARNED, registry.LLM, registry.GUARD)
    with pytest.raises(ValueError, match="judge 'keyword' is registered twice"):
        registry.register(registry.REGISTRY["keyword"])


def test_params_switch_judges_on():
    assert registry.names(params(learned=False)) == ["keyword"]
    assert registry.names(params()) == ["keyword", "learned_refusal", "learned_harmful"]
    assert registry.names(params(questions=["harmbench"])) == registry.names(params()) + ["llm_harmbench"]
    assert registry.names(params(), kinds=("refusal",)) == ["keyword", "learned_refusal"]
    # the study-built outcome and degeneracy judges are registered but not made for every reply
    assert "outcome" not in registry.names(params())
    assert registry.names(params(), run_wide=False) == ["outcome", "degeneracy"]
    assert judges.emitted(params(questions=["refusal"])) == set(registry.names(params())) | {"llm_refusal"}
    assert [j.name for j in judges.build(params(learned=False))] == ["keyword"]


def test_a_params_key_naming_an_unknown_or_unconfigured_judge_stops_naming_the_alternatives():
    with pytest.raises(ParamsError, match=r"^x.yaml: kv.confirmatory.reference: unknown judge 'llm_harmbnech'; "
                                          r"registered judges: keyword, learned_refusal, .*llm_harmbench"):
        registry.need_judge(params(), "x.yaml", "kv.confirmatory.reference", "llm_harmbnech")
    with pytest.raises(ParamsError, match=r"expected a judge the run emits \(\['keyword'.*got 'llm_harmbench' \(it "
                                          r"needs an LLM judge model"):
        registry.need_judge(params(), "x.yaml", "kv.confirmatory.reference", "llm_harmbench")
    with pytest.raises(ParamsError, match=r"judge 'learned_harmful' is of kind 'harmful'; expected a judge of kind "
                                          r"refusal \(keyword, learned_refusal in this run\)"):
        registry.need_judge(params(), "x.yaml", "frames.second_judge", "learned_harmful", kinds=("refusal",))
    registry.need_judge(params(), "x.yaml", "kv.confirmatory.reference", "learned_refusal")
    registry.need_judge(params(), "x.yaml", "frames.outcome", "outcome", run_wide=False)


def test_definitions_come_from_the_registry():
    assert judges.definition("keyword").startswith("refusal when the reply contains a string of a published")
    with pytest.raises(ValueError, match="unknown judge 'nope'; registered judges: keyword"):
        judges.definition("nope")
