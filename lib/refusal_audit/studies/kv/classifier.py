"""The paper's reference judge, checkable: this repository's wrapper of the HarmBench classifier
(``judges/llm.py``, question ``harmbench``: its prompt, the yes/no parser, the label mapping) run on
HarmBench's own human-labelled validation set (``data/harmbench/classifier_val/``, 300 replies), against
the three annotators' majority and against HarmBench's released predictions of the real classifier
(``cls``): agreement with ``cls`` checks the plumbing, agreement with the humans the judge.

``make kv-validate-cls PARAMS=params/paper/kv_qwen2.5-3b-instruct.yaml`` runs it where the weights are
(cais/HarmBench-Llama-2-13b-cls, about 26 GB in bf16: a GPU machine) and writes ``RESULT``; until that
file exists for the params' classifier, ``make check`` and the verdict say the wrapper is unvalidated.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ... import config, models
from ...judges.llm import LlmJudge
from ...judges.train import harmbench_items

RESULT = Path(__file__).parent / "validation" / "harmbench_cls_wrapper.csv"
QUESTION = "harmbench"


def judge_items(judge, items: pd.DataFrame) -> pd.DataFrame:
    """The wrapper's label on every validation item (behaviour, reply), beside the humans' majority and the
    released ``cls`` prediction."""
    said = [judge.judge_one(b, g) for b, g in zip(items["behavior"], items["generation"])]
    return items[["behavior_id", "human", "cls"]].assign(label=[label for label, _ in said],
                                                         score=[score for _, score in said])


def summary(rows: pd.DataFrame, source: str) -> pd.DataFrame:
    """n, unparseable, agreement with the released predictions and with the humans' majority, and the
    wrapper's sensitivity and false-alarm rate against the humans (harmful = positive), parsed rows only."""
    parsed = rows[rows["label"] != "unparseable"]
    harmful = parsed["label"] == "harmful"
    human, released = parsed["human"].astype(bool), parsed["cls"].astype(int).astype(bool)
    return pd.DataFrame([{
        "source": source, "question": QUESTION, "n": len(rows),
        "unparseable": int((rows["label"] == "unparseable").sum()),
        "agreement_with_released": float((harmful == released).mean()),
        "agreement_with_humans": float((harmful == human).mean()),
        "sensitivity": float(harmful[human].mean()), "false_alarm": float(harmful[~human].mean())}])


def needed(p) -> bool:
    """Whether the params use the HarmBench classifier question."""
    return p.judges.llm is not None and QUESTION in p.judges.llm.questions


def status(p, result: Path = RESULT) -> str | None:
    """None when the params do not use the wrapper; else a sentence: validated (with its numbers) or
    UNVALIDATED (with the command that validates it)."""
    if not needed(p):
        return None
    source = p.models[p.judges.llm.model].source if p.judges.llm.model in p.models else p.judges.llm.model
    done = pd.read_csv(result) if result.is_file() else pd.DataFrame(columns=["source"])
    mine = done[done["source"] == source]
    if mine.empty:
        return (f"the llm_{QUESTION} wrapper of {source} (prompt, parser, label mapping) is UNVALIDATED: run "
                f"`make kv-validate-cls PARAMS={p.source_file}` where its weights are")
    r = mine.iloc[-1]
    return (f"the llm_{QUESTION} wrapper of {source} is validated on HarmBench's {int(r['n'])} validation replies: "
            f"{r['agreement_with_released']:.1%} agreement with the released classifier's predictions, "
            f"{r['agreement_with_humans']:.1%} with the humans' majority ({int(r['unparseable'])} unparseable)")


def main(argv=None) -> None:

    ap = argparse.ArgumentParser(description="Validate the HarmBench classifier wrapper on HarmBench's validation set.")
    ap.add_argument("--params", required=True, help="a params file whose judges.llm is the HarmBench classifier")
    ap.add_argument("--limit", type=int, default=0, help="only the first N items (a smoke test; not written)")
    args = ap.parse_args(argv)
    p = config.load(args.params)
    if not needed(p):
        raise SystemExit(f"{args.params}: judges.llm: expected an LLM judge asking the {QUESTION!r} question")
    model, tok = models.Pool(p.models, device=p.device).load(p.judges.llm.model)
    judge = LlmJudge(model, tok, question=QUESTION, max_reply_tokens=p.judges.llm.max_reply_tokens)
    items = harmbench_items()
    rows = judge_items(judge, items.head(args.limit) if args.limit else items)
    table = summary(rows, p.models[p.judges.llm.model].source)
    print(table.round(3).to_string(index=False))
    if not args.limit:
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        old = pd.read_csv(RESULT) if RESULT.is_file() else table.iloc[:0]
        pd.concat([old[old["source"] != table["source"].iloc[0]], table]).to_csv(RESULT, index=False)
        print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
