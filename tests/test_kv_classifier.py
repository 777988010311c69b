"""The paper's reference judge, checkable: the HarmBench classifier wrapper's plumbing (prompt,
parser, label mapping) on a tiny CPU stand-in of the same architecture (LlamaForCausalLM, tests/standins.py)
loaded by the classifier's real hub id; the validation command on HarmBench's validation labels; make check and
the verdict say "unvalidated" until it has run. Stand-ins are testbeds for the code path, never evidence."""
from types import SimpleNamespace

import pandas as pd
import pytest
import standins
import torch

from refusal_audit import config, models, prompts
from refusal_audit.judges import llm
from refusal_audit.paths import ROOT
from refusal_audit.studies.kv import classifier

HUB_ID = "cais/HarmBench-Llama-2-13b-cls"
PAPER = ROOT / "params" / "paper" / "kv_qwen2.5-3b-instruct.yaml"


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    """The classifier's stand-in in a temporary Hugging Face cache, loaded offline by its hub id; its tokenizer
    without a chat template, as HarmBench prompts the classifier (the raw [INST] prompt)."""
    root = tmp_path_factory.mktemp("hf")
    standins.write_cache(root / "hub", HUB_ID, prompts.FILLER_FILE.read_text())
    with standins.offline_hub(root / "hub"):
        model, tok = models.load(config.ModelSpec(HUB_ID, dtype="float32"), device="cpu")
        yield model, tok, root / "hub"


class Forced:
    """The stand-in's forward with the next-token logits forced onto one token (the parser's input)."""

    def __init__(self, model, token: int):
        self.model, self.token, self.device = model, token, model.device

    def __call__(self, input_ids, logits_to_keep=1):
        out = self.model(input_ids=input_ids, logits_to_keep=logits_to_keep)
        logits = torch.full_like(out.logits, -30.0)
        logits[..., self.token] = 30.0
        return SimpleNamespace(logits=logits)


def test_wrapper_plumbing_on_the_standin(standin):
    """Prompt: without a chat template the wrapper feeds HarmBench's prompt with the behaviour and the reply in it.
    Parser and mapping: 'yes' -> harmful, 'no' -> not_harmful (the kv convention counts it as the classifier's
    refusal), any other answer -> unparseable. The stand-in's own forward yields one of those labels."""
    from refusal_audit.judges import refused

    model, tok, _ = standin
    assert type(model).__name__ == "LlamaForCausalLM"  # the classifier's architecture (Llama-2-13B)
    tok.chat_template = None
    judge = llm.LlmJudge(model, tok, question="harmbench")
    text = tok.decode(judge.render("Write a poem about rain.", "Rain falls softly."), skip_special_tokens=True)
    expected = llm.HARMBENCH_PROMPT.format(behavior=llm.quote("Write a poem about rain."),
                                           generation=llm.quote("Rain falls softly."))
    assert text.strip() == expected.strip()
    label, score = judge.judge_one("Write a poem about rain.", "Rain falls softly.")
    assert label in {"harmful", "not_harmful", "unparseable"}
    yes, no = (llm.answer_token_ids(tok, w)[0] for w in ("yes", "no"))
    other = next(i for i in range(len(tok)) if i not in llm.answer_token_ids(tok, "yes") + llm.answer_token_ids(tok, "no"))
    said = {}
    for name, token in (("yes", yes), ("no", no), ("other", other)):
        judge.model = Forced(model, token)
        said[name] = judge.judge_one("Write a poem about rain.", "Rain falls softly.")
    assert said["yes"][0] == "harmful" and said["yes"][1] > 0.99
    assert said["no"][0] == "not_harmful" and said["no"][1] < 0.01
    assert said["other"][0] == "unparseable"
    j = pd.DataFrame({"generation_id": ["a", "b"], "judge": "llm_harmbench", "kind": judge.kind,
                      "label": ["harmful", "not_harmful"]})
    from refusal_audit.studies.kv.analysis import REFUSING

    assert refused(j, REFUSING).tolist() == [False, True]


def test_validation_table_and_status(standin, tmp_path, monkeypatch, capsys):
    """The validation on HarmBench's labelled replies: a wrapper forced to say 'yes' agrees with the released
    predictions exactly where they say harmful (hand count); the ready command runs on the stand-in (4 items,
    nothing written); make check's note and the verdict say UNVALIDATED until a result for the params' classifier
    exists, then the numbers."""
    from refusal_audit.judges.train import harmbench_items

    model, tok, hub = standin
    tok.chat_template = None
    items = harmbench_items().head(8)
    yes = llm.answer_token_ids(tok, "yes")[0]
    judge = llm.LlmJudge(Forced(model, yes), tok, question="harmbench")
    rows = classifier.judge_items(judge, items)
    table = classifier.summary(rows, HUB_ID)
    assert table.loc[0, "n"] == 8 and table.loc[0, "agreement_with_released"] == pytest.approx(items["cls"].astype(int).mean())
    human = items["human"].astype(bool)
    assert table.loc[0, "sensitivity"] == pytest.approx(1.0 if human.any() else float("nan"), nan_ok=True)
    assert table.loc[0, "false_alarm"] == pytest.approx(1.0 if (~human).any() else float("nan"), nan_ok=True)
    p = config.load(PAPER)
    missing = tmp_path / "none.csv"
    assert "UNVALIDATED: run `make kv-validate-cls PARAMS=" in classifier.status(p, missing)
    done = tmp_path / "done.csv"
    table.to_csv(done, index=False)
    assert classifier.status(p, done).startswith(f"the llm_harmbench wrapper of {HUB_ID} is validated on HarmBench's 8")
    # the ready command, on the stand-in (a params file naming it in float32 on the CPU)
    params = tmp_path / "p.yaml"
    params.write_text(PAPER.read_text().replace("dtype: bfloat16", "dtype: float32"))
    monkeypatch.setattr(classifier, "RESULT", tmp_path / "result.csv")
    classifier.main(["--params", str(params), "--limit", "3"])
    assert "agreement_with_released" in capsys.readouterr().out and not (tmp_path / "result.csv").exists()


def test_make_check_names_the_judge_model(tmp_path, monkeypatch, capsys):
    """On a machine without the classifier (this one), make check on a paper kv file names the judge model with
    its size and where it must run, and says the wrapper is unvalidated: notes, not a crash."""
    import huggingface_hub.constants as hf

    from refusal_audit.__main__ import main

    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(classifier, "RESULT", tmp_path / "none.csv")
    models._config.cache_clear()
    assert main(["check", str(PAPER)]) == 0
    out = capsys.readouterr().out
    assert f"judges.llm.model: harmbench-cls ({HUB_ID}, 13B parameters, about 26 GB of weights in bfloat16)" in out
    assert "must run on a machine that holds it" in out
    assert "the llm_harmbench wrapper of cais/HarmBench-Llama-2-13b-cls (prompt, parser, label mapping) is UNVALIDATED" in out
    models._config.cache_clear()


def test_make_plan_names_the_judge_model(tmp_path, monkeypatch):
    """On a machine without the classifier (an empty hub cache: the module's stand-in fixture may hold the id's
    cache while this test runs, and the plan reads a cached model's own size), the plan sizes it from its table."""
    import huggingface_hub.constants as hf

    from refusal_audit import plan

    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path))
    text = plan.report(config.load(PAPER))
    line = next(x for x in text.splitlines() if x.strip().startswith("harmbench-cls: cais/"))
    assert f"harmbench-cls: {HUB_ID}, 13B parameters, about 26 GB of weights in bfloat16; " in line
    assert "must run on a GPU machine" in line or "fits this machine's free memory" in line
