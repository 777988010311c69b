"""Contamination audit: does a training pool contain an evaluation prompt, exactly or nearly?

Exact: texts compared after normalisation (Unicode NFKC, case folding, punctuation removed,
whitespace collapsed). Near-duplicate: cosine similarity of all-MiniLM-L6-v2 embeddings at or above
a threshold (0.85 by default: paraphrases of one request score above it, different requests on
one topic below it).
"""
from __future__ import annotations

import re
import unicodedata

import numpy as np
import pandas as pd

NEAR_DUPLICATE = 0.85


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"[^\w\s]", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def exact_overlap(train: list[str], evaluation: list[str]) -> list[tuple[int, int]]:
    """(train index, evaluation index) pairs that are equal after normalisation."""
    where: dict[str, list[int]] = {}
    for j, t in enumerate(evaluation):
        where.setdefault(normalise(t), []).append(j)
    return [(i, j) for i, t in enumerate(train) for j in where.get(normalise(t), [])]


def near_duplicates(train: list[str], evaluation: list[str], threshold: float = NEAR_DUPLICATE,
                    embed=None) -> pd.DataFrame:
    """Pairs with embedding cosine >= ``threshold``: columns train_index, eval_index, similarity."""
    if embed is None:
        from .judges.learned import embed
    a, b = embed(train), embed(evaluation)
    sim = np.asarray(a) @ np.asarray(b).T
    i, j = np.nonzero(sim >= threshold)
    return pd.DataFrame({"train_index": i, "eval_index": j, "similarity": sim[i, j]})


def audit(train: list[str], evaluations: dict[str, list[str]], threshold: float = NEAR_DUPLICATE,
          embed=None) -> pd.DataFrame:
    """One row per evaluation set: exact and near-duplicate overlaps with the training pool."""
    rows = []
    for name, texts in evaluations.items():
        near = near_duplicates(train, texts, threshold, embed)
        rows.append({"evaluation": name, "n_eval": len(texts), "n_train": len(train),
                     "exact": len(exact_overlap(train, texts)), "near_duplicate": len(near),
                     "max_similarity": float(near["similarity"].max()) if len(near) else None})
    return pd.DataFrame(rows)
