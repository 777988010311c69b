"""The ordinal LLM rubric of reply pairs (seed 6.1: a secondary outcome of semantic response divergence, "an
ordinal LLM judge rubric on a stratified 10 % subsample"), reported apart from the verdict.

The subsample: ``frames.rubric.share`` of each stratum's drawn items (at least one), drawn under the run's seed
before any score is read. For each model of the roster (the null control left out: its greedy replies are one
prompt under every label) and each subsampled item, the greedy (T = 0) replies are paired ACROSS frames (same
paraphrase: each frame pair x A and B) and ACROSS paraphrases (same frame: A against B under each frame), and
the LLM question ``response_rubric`` (``judges/llm.py``; its scale in DEFINITIONS.md "Secondary outcomes") put to
``frames.rubric.model`` scores each pair 1-5 (5 = the same response, 1 = opposite or unrelated responses): the
most probable score, NaN when the model puts too little probability on the five answers or a reply is empty.

``divergence``: per model and frame pair, per item the mean score across frames (over A and B) against the mean
across paraphrases (over the pair's two frames); the difference paraphrase - frame (positive: the replies are
less alike across frames than across rewordings), mean over items with a t interval and two-sided p
(``divergence.paired_difference``), uncorrected and descriptive.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ... import divergence as D
from ...judges.llm import LlmJudge
from .params import NAME, NULL, PARAPHRASES, pairs_of

COLUMNS = ["model", "item_id", "stratum", "comparison", "f1", "f2", "paraphrase", "frame", "score", "share", "scorer"]


def subsample(items: pd.DataFrame, share: float, seed: int) -> list[str]:
    """``share`` of each stratum's items (rounded up, at least one), drawn under ``seed``; ``items``: item_id,
    stratum (one row per item)."""
    out = []
    for _, g in items.drop_duplicates("item_id").groupby("stratum", sort=True):
        n = max(1, math.ceil(share * len(g)))
        out += g["item_id"].sort_values().sample(n, random_state=seed).tolist()
    return sorted(out)


def reply_pairs(greedy: pd.DataFrame, frames: list[str]) -> pd.DataFrame:
    """Every pair the rubric scores, from one greedy reply per (model, item, frame, paraphrase): across frames
    (each frame pair, same paraphrase) and across paraphrases (A against B, same frame)."""
    cell = {(m, i, f, r): rep for m, i, f, r, rep in
            zip(greedy["model"], greedy["item_id"], greedy["frame"], greedy["paraphrase"], greedy["reply"])}
    stratum = greedy.drop_duplicates("item_id").set_index("item_id")["role"]
    rows = []
    for m, i in greedy[["model", "item_id"]].drop_duplicates().itertuples(index=False):
        for f1, f2 in pairs_of(frames):
            for r in PARAPHRASES:
                if (m, i, f1, r) in cell and (m, i, f2, r) in cell:
                    rows.append({"model": m, "item_id": i, "stratum": stratum[i], "comparison": "frames", "f1": f1,
                                 "f2": f2, "paraphrase": r, "frame": "", "reply_1": cell[m, i, f1, r],
                                 "reply_2": cell[m, i, f2, r]})
        for f in frames:
            if (m, i, f, "A") in cell and (m, i, f, "B") in cell:
                rows.append({"model": m, "item_id": i, "stratum": stratum[i], "comparison": "paraphrases", "f1": "",
                             "f2": "", "paraphrase": "", "frame": f, "reply_1": cell[m, i, f, "A"],
                             "reply_2": cell[m, i, f, "B"]})
    return pd.DataFrame(rows, columns=COLUMNS[:8] + ["reply_1", "reply_2"])


def score(p, generations: pd.DataFrame, load) -> pd.DataFrame:
    """The rubric's scores of every pair on the subsample (``COLUMNS``; replies are not kept). ``load(name)``:
    (model, tokenizer) of a model of the run."""
    fr = p.studies[NAME]
    rb = fr.rubric
    g = generations[(generations["temperature"] == 0) & ~generations["model"].str.endswith(NULL)]
    g = g.drop_duplicates(["model", "item_id", "frame", "paraphrase"])
    chosen = subsample(g[["item_id", "role"]].rename(columns={"role": "stratum"}), rb.share, p.seed)
    pairs = reply_pairs(g[g["item_id"].isin(chosen)], list(fr.frames))
    model, tok = load(rb.model)
    judge = LlmJudge(model, tok, question="response_rubric", name="llm_rubric", max_reply_tokens=rb.max_reply_tokens)
    verdicts = [judge.judge_one(str(a), str(b)) for a, b in zip(pairs["reply_1"], pairs["reply_2"])]
    return pairs.assign(score=[float(v) if v != "unparseable" else np.nan for v, _ in verdicts],
                        share=[s for _, s in verdicts], scorer=rb.model)[COLUMNS]


def divergence(rubric: pd.DataFrame, frames: list[str], alpha: float) -> pd.DataFrame:
    """Per model and frame pair: the mean rubric score across frames and across paraphrases, their per-item
    difference (paraphrase - frame) with its interval and two-sided p (items with both scores)."""
    if rubric is None or not len(rubric):
        return pd.DataFrame([{"note": "the rubric scored no pair (frames.rubric unset, or no greedy replies)"}])
    rows = []
    for model, g in rubric.groupby("model", sort=True):
        across_p = g[g["comparison"] == "paraphrases"]
        for f1, f2 in pairs_of(frames):
            fr_ = g[(g["comparison"] == "frames") & (g["f1"] == f1) & (g["f2"] == f2)].groupby("item_id")["score"].mean()
            pa = across_p[across_p["frame"].isin([f1, f2])].groupby("item_id")["score"].mean()
            t = pd.concat([fr_.rename("frame_score"), pa.rename("paraphrase_score")], axis=1).dropna()
            row = {"model": model, "contrast": f"{f1}-{f2}", "n_items": len(t), "scorer": g["scorer"].iloc[0],
                   "n_pairs": int(g["score"].notna().sum()), "n_unparseable": int(g["score"].isna().sum())}
            if len(t) < 2:
                rows.append({**row, "note": "fewer than 2 items with both scores"})
                continue
            d = D.paired_difference(t["paraphrase_score"], t["frame_score"], None, alpha)
            rows.append({**row, "frame_score": float(t["frame_score"].mean()),
                         "paraphrase_score": float(t["paraphrase_score"].mean()), "difference": float(d.difference),
                         "ci_lo": float(d.lo), "ci_hi": float(d.hi), "p": float(d.p)})
    return pd.DataFrame(rows)
