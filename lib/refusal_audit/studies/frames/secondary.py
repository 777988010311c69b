"""The frames study's secondary outcomes (seed 6.1), each reported apart from the verdict.

* **Semantic response divergence**: per model, item and frame pair, on the greedy (T = 0) replies (one
  deterministic reply per cell), the cosine distance of reply embeddings ACROSS frames (same paraphrase;
  mean over the two paraphrases) against that ACROSS paraphrases (same frame; mean over the pair's two
  frames); the per-item difference, mean over items, cluster t test (``divergence.paired_difference``). A
  frame that changes what a model says more than rewording the request does shows a positive difference.
  The encoder is ``frames.encoder`` (``encoder.embed_with``): the shipped all-MiniLM-L6-v2 by default; the seed's
  all-mpnet-base-v2 by Hugging Face id where it is in the local cache (the paper file names it; DEFINITIONS.md).
* **Task fidelity**: on items whose row carries a gold answer (column ``gold`` of the items file): the share
  of replies containing it, per model and frame. None of the shipped items has one (HarmBench, JailbreakBench
  and XSTest prompts have no reference answers), so the table says so.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import divergence
from ...encoder import SHIPPED, embed_with
from .params import pairs_of


def semantic_divergence(generations: pd.DataFrame, frames: list[str], alpha: float, encoder: str = SHIPPED) -> pd.DataFrame:
    """One row per model and frame pair: mean across-frame and across-paraphrase cosine distances of the
    greedy replies, their per-item difference with its interval and two-sided p."""
    g = generations[generations["temperature"] == 0]
    if not len(g):
        return pd.DataFrame([{"note": "no greedy replies"}])
    g = g.drop_duplicates(["model", "item_id", "frame", "paraphrase"])
    vec = embed_with(encoder, g["reply"].fillna("").astype(str).tolist())
    cells = {(m, i, f, r): k for k, (m, i, f, r) in enumerate(zip(g["model"], g["item_id"], g["frame"], g["paraphrase"]))}

    def dist(a, b):
        return 1.0 - float(vec[a] @ vec[b])

    rows = []
    for model, mg in g.groupby("model", sort=True):
        for f1, f2 in pairs_of(frames):
            per = []
            for item in mg["item_id"].drop_duplicates():
                keys = [(model, item, f, r) for f in (f1, f2) for r in ("A", "B")]
                if not all(k in cells for k in keys):
                    continue
                c = {(f, r): cells[(model, item, f, r)] for f in (f1, f2) for r in ("A", "B")}
                across_f = np.mean([dist(c[f1, r], c[f2, r]) for r in ("A", "B")])
                across_p = np.mean([dist(c[f, "A"], c[f, "B"]) for f in (f1, f2)])
                per.append((item, across_f, across_p))
            if len(per) < 3:
                continue
            t = pd.DataFrame(per, columns=["item_id", "frame_distance", "paraphrase_distance"])
            d = divergence.paired_difference(t["frame_distance"], t["paraphrase_distance"], None, alpha)
            rows.append({"model": model, "contrast": f"{f1}-{f2}", "n_items": len(t),
                         "frame_distance": float(t["frame_distance"].mean()),
                         "paraphrase_distance": float(t["paraphrase_distance"].mean()),
                         "difference": float(d.difference), "ci_lo": float(d.lo), "ci_hi": float(d.hi), "p": float(d.p),
                         "encoder": encoder, "replies": "greedy (T = 0)"})
    return pd.DataFrame(rows) if rows else pd.DataFrame([{"note": "fewer than 3 items with all four greedy cells"}])


def fidelity(items: pd.DataFrame, generations: pd.DataFrame) -> pd.DataFrame:
    """Per model and frame: the share of replies containing the item's gold answer, on items with one."""
    if "gold" not in items or not items["gold"].fillna("").astype(str).str.strip().any():
        return pd.DataFrame([{"note": "no item of this run carries a gold answer (column 'gold' of the items file); "
                                      "task fidelity is not computed"}])
    gold = items.set_index("item_id")["gold"].fillna("").astype(str).str.strip()
    gold = gold[gold != ""]
    g = generations[generations["item_id"].isin(gold.index)]
    hit = [str(a).casefold() in str(r).casefold() for a, r in zip(g["item_id"].map(gold), g["reply"])]
    return (g.assign(correct=hit).groupby(["model", "frame"])
            .agg(n_items=("item_id", "nunique"), n_replies=("correct", "size"), fidelity=("correct", "mean"))
            .reset_index())
