"""The same-meaning rule measured (how often "cosine > theta" is right about the meaning of two prompts): embed the
labelled cross-cluster pairs of
``data/confusion/same_meaning_pairs.csv`` with the study's encoder and write
``lib/refusal_audit/assets/same_meaning_pairs_scored.csv`` (ids, labels, cosines; no text), then print
precision, recall and F1 of "cosine > theta" over a grid of theta. The run reads the scored table.

    .venv/bin/python benchmarks/confusion_same_meaning.py
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from refusal_audit.encoder import embed
from refusal_audit.studies.confusion import meaning
from refusal_audit.studies.confusion.same_meaning_judge import labelled_texts


def main() -> None:
    text, label = labelled_texts()
    pairs = meaning.read_pairs(meaning.PAIRS, text)
    a = embed([text[s][i] for s, i in zip(pairs["source"], pairs["id_a"])])
    b = embed([text[s][i] for s, i in zip(pairs["source"], pairs["id_b"])])
    scored = pairs.drop(columns=["line"]).assign(
        prompt_label=[label[s][i] for s, i in zip(pairs["source"], pairs["id_a"])],
        cosine=np.round(np.einsum("ij,ij->i", a, b).astype(float), 4))
    scored.to_csv(meaning.SCORED, index=False)
    table = meaning.rule_table(scored)
    pd.set_option("display.width", 200)
    print(table[["group", "theta", "n_pairs", "n_same", "n_called", "precision", "precision_lo", "precision_hi",
                 "recall", "recall_lo", "recall_hi", "f1"]].round(3).to_string(index=False))


if __name__ == "__main__":
    main()
