"""The same-meaning judge: a language model asked whether two prompts have the same intent (``judges.llm``'s
``same_meaning`` question), a second rule beside "cosine > theta", whose measured precision is low (``meaning.py``).

``confusion.same_meaning_judge`` names a model of the params (a GPU route: a judge worth trusting is a large
instruction model). ``make confusion`` then pre-labels its blind pairs sheet (``judge_label``, ``judge_p_same``, the
person's ``label`` left empty: the sheet stays the person's to fill) and prints the judge's precision and recall on
the repository's 151 hand-labelled pairs (``data/confusion/same_meaning_pairs.csv``) beside its labels, so a reader
sees how far its pre-labels can be trusted. On the embedded SmolLM2-135M (measured in
``benchmarks/confusion_same_meaning_judge.py``) it has precision 0.44 and recall 0.57, weakly above chance and far
from a label: the route is proven end to end there, not the judge.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import config
from ...paths import DATA_DIR, PARAMS_DIR
from . import clusters as cl
from . import meaning

QUESTION = "same_meaning"


def labelled_texts() -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """(source -> id -> text, source -> id -> intended label) of the labelled pairs' two sources: the default
    corpus's clusters (id = cluster-member) and the paper file's seeds (id = cluster id)."""
    rows = cl.read_file(DATA_DIR / "confusion" / "clusters.csv")
    ids = rows["cluster_id"] + "-" + rows["member"].astype(str)
    p = config.load(PARAMS_DIR / "paper" / "confusion_paraguard.yaml")
    seeds = cl.seeds_from_sets(p.studies["confusion"].data.clusters, p.seed)
    return ({"clusters": dict(zip(ids, rows["prompt"])), "paper_seeds": dict(zip(seeds["cluster_id"], seeds["prompt"]))},
            {"clusters": dict(zip(ids, rows["label"])), "paper_seeds": dict(zip(seeds["cluster_id"], seeds["label"]))})


def build(model, tokenizer):
    """The judge (``judges.llm.LlmJudge`` with the same-meaning question) on a loaded causal LM."""
    from ...judges.llm import LlmJudge  # lazy: keeps torch off this module

    return LlmJudge(model, tokenizer, question=QUESTION, name="llm_same_meaning")


def judge_pairs(judge, first: list[str], second: list[str]) -> pd.DataFrame:
    """One row per pair: ``judge_label`` (same, different or unparseable) and ``judge_p_same`` (P(yes) among the
    answers; NaN when unparseable)."""
    out = [judge.judge_one(a, b) for a, b in zip(first, second)]
    return pd.DataFrame({"judge_label": [x for x, _ in out], "judge_p_same": [s for _, s in out]})


_ANSWERS: dict[tuple[int, str], tuple] = {}  # (id of the judge's model, its question) -> labelled_answers


def labelled_answers(judge) -> tuple[pd.DataFrame, list[str], list[str], pd.DataFrame]:
    """(the labelled pairs, first texts, second texts, the judge's answers) on the repository's labelled pairs; computed
    once per loaded model in a process (the answers of one model to one question do not change)."""
    key = (id(judge.model), judge.question)
    if key not in _ANSWERS:
        texts, _ = labelled_texts()
        pairs = meaning.read_pairs(meaning.PAIRS, texts)
        a = [texts[s][i] for s, i in zip(pairs["source"], pairs["id_a"])]
        b = [texts[s][i] for s, i in zip(pairs["source"], pairs["id_b"])]
        _ANSWERS[key] = (pairs, a, b, judge_pairs(judge, a, b))
    return _ANSWERS[key]


def measured(judge) -> dict[str, float]:
    """The judge's precision and recall (Wilson) on the repository's labelled pairs, as ``meaning.precision_recall``
    gives them for the cosine; an unparseable answer counts as not calling the pair the same."""
    pairs, _, _, got = labelled_answers(judge)
    out = meaning.called_precision_recall(pairs["label"].eq("same").to_numpy(), got["judge_label"].eq("same").to_numpy())
    return {**out, "n_unparseable": int(got["judge_label"].eq("unparseable").sum()),
            "share_called_same": float(np.mean(got["judge_label"].eq("same")))}


def words(m: dict[str, float], model: str) -> str:
    """The judge's measured error in one sentence (the sheet's pre-labels stand beside it)."""
    return (f"Same-meaning judge {model} (judges.llm '{QUESTION}' question): on {m['n_pairs']} hand-labelled pairs it "
            f"calls {m['n_called']} same, precision {m['precision']:.2f} [{m['precision_lo']:.2f}, "
            f"{m['precision_hi']:.2f}], recall {m['recall']:.2f} [{m['recall_lo']:.2f}, {m['recall_hi']:.2f}] (Wilson; "
            f"{m['n_unparseable']} unparseable); its labels on the sheet are a pre-label beside that error, not a "
            "verdict.")
