"""The same-meaning rule measured: its precision and recall on hand-labelled cross-cluster pairs.

Across clusters the study calls two prompts of the same label the same meaning when their MiniLM cosine
exceeds theta (DEFINITIONS.md). ``data/confusion/same_meaning_pairs.csv`` labels pairs of prompts of the same
intended label from different clusters or seeds, at and near theta, ``same`` or ``different`` intent (the
labelling rule is in ``data/confusion/SOURCE.md``). ``benchmarks/confusion_same_meaning.py`` embeds them once
and commits their cosines (``assets/same_meaning_pairs_scored.csv``, ids, labels and cosines only); the run
reads that table (``rule_at``), so the verdict states the rule's error without loading the encoder.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd

from ... import stats

PAIRS = Path(__file__).resolve().parents[4] / "data" / "confusion" / "same_meaning_pairs.csv"
SCORED = Path(__file__).resolve().parents[2] / "assets" / "same_meaning_pairs_scored.csv"
LABELS = ("same", "different")
COLUMNS = ["source", "id_a", "id_b", "label"]


def read_pairs(path: str | Path, texts: dict[str, dict[str, str]]) -> pd.DataFrame:
    """The labelled pair file, checked row by row before any work: ``texts`` maps each source to its prompts
    (id -> text). Unknown source or id, a label outside {same, different}, or a pair whose two prompts are the
    same prompt (one id, or equal texts) stops with one line naming the file and the row (file lines, the
    header is line 1)."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != COLUMNS:
            raise ValueError(f"{path}: line 1: columns {reader.fieldnames}; expected {COLUMNS}")
        rows = []
        for line, row in enumerate(reader, start=2):
            src, a, b, label = (row[c].strip() for c in COLUMNS)
            if src not in texts:
                raise ValueError(f"{path}: line {line}: source {src!r}; expected one of {sorted(texts)}")
            for x in (a, b):
                if x not in texts[src]:
                    raise ValueError(f"{path}: line {line}: unknown id {x!r} in source {src!r}")
            if label not in LABELS:
                raise ValueError(f"{path}: line {line}: label {label!r}; expected one of {LABELS}")
            if a == b or texts[src][a].strip().lower() == texts[src][b].strip().lower():
                raise ValueError(f"{path}: line {line}: {a!r} and {b!r} are the same prompt; a labelled pair "
                                 "needs two different prompts")
            rows.append({"line": line, "source": src, "id_a": a, "id_b": b, "label": label})
    return pd.DataFrame(rows)


def precision_recall(same: np.ndarray, cosine: np.ndarray, theta: float, alpha: float = 0.05) -> dict[str, float]:
    """The rule "cosine > theta" against the labels: precision (labelled same among the pairs it calls same) and
    recall (called same among the pairs labelled same), each with its Wilson interval."""
    if not 0 < theta < 1:
        raise ValueError(f"theta must be in (0, 1) (a cosine threshold), got {theta}")
    same, called = np.asarray(same, dtype=bool), np.asarray(cosine) > theta
    tp, n_called, n_same = int((same & called).sum()), int(called.sum()), int(same.sum())
    out = {"theta": theta, "n_pairs": len(same), "n_same": n_same, "n_called": n_called, "true_positive": tp}
    for name, k, n in (("precision", tp, n_called), ("recall", tp, n_same)):
        r = stats.wilson(k, n, alpha) if n else None
        out.update({name: r.rate if r else np.nan, f"{name}_lo": r.lo if r else np.nan,
                    f"{name}_hi": r.hi if r else np.nan})
    return out


def rule_table(scored: pd.DataFrame, thetas=tuple(np.round(np.arange(0.60, 0.96, 0.025), 3))) -> pd.DataFrame:
    """Precision, recall and F1 of "cosine > theta" at each theta of a grid, over all pairs and per label."""
    rows = []
    for group, g in [("all", scored)] + list(scored.groupby("prompt_label", sort=True)):
        for t in thetas:
            r = precision_recall(g["label"].eq("same").to_numpy(), g["cosine"].to_numpy(), float(t))
            p, q = r["precision"], r["recall"]
            rows.append({"group": group, **r, "f1": 2 * p * q / (p + q) if p + q > 0 else np.nan})
    return pd.DataFrame(rows)


def rule_at(theta: float, scored: pd.DataFrame | None = None) -> dict[str, float] | None:
    """Precision and recall of the run's theta on the committed scored pairs (None when the table is absent)."""
    if scored is None:
        if not SCORED.is_file():
            return None
        scored = pd.read_csv(SCORED)
    return precision_recall(scored["label"].eq("same").to_numpy(), scored["cosine"].to_numpy(), theta)
