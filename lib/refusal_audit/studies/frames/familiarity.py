"""Familiarity of an item to a model (the contamination covariate, arXiv 2605.06327 section 4.4).

Min-K% Prob (Shi et al. 2023, "Detecting Pretraining Data from Large Language Models",
arXiv:2310.16789): the mean of the k % lowest token log-probabilities the model gives the text,
``MinK(x) = 1/|S| sum_{i in S} log p(x_i | x_<i)`` with S the ceil(k |x|) tokens of lowest
log-probability (tokens after the first; the text alone, no chat template). Higher = more familiar
(the paper's detector calls a text seen when MinK is above a threshold). Per item (``per_item``): the
score of the PUBLIC source text (the benchmark's wording, which pretraining may have seen), read
against a reference, the same score on the item's two paraphrased requests (written for this project,
so unseen): "familiar" = source above its reference by more than a margin from the null reference
distribution (``per_item``); the bodies' score is kept beside it. The lexical half (overlap with the project's
training pools) comes from
``contamination.audit_pool``.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from ... import contamination
from ...padding import pad_batch, positions

LOGIT_BATCH_TOKENS = 2048  # padded tokens per forward pass: their logits (x 49k vocabulary, fp32) are ~0.4 GB


def token_logprobs(model, tokenizer, texts: list[str]) -> list[np.ndarray]:
    """Per text, log p(x_i | x_<i) for every token after the first (the text alone, no template); texts
    of similar length share a left-padded forward pass (``padding``)."""

    ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    for t, x in zip(texts, ids):
        if len(x) < 2:
            raise ValueError(f"familiarity: text too short to score ({len(x)} token): {t[:40]!r}")
    batches: list[list[int]] = [[]]  # shortest first; a batch's texts x its longest <= LOGIT_BATCH_TOKENS
    for i in sorted(range(len(ids)), key=lambda i: len(ids[i])):
        if batches[-1] and (len(batches[-1]) + 1) * len(ids[i]) > LOGIT_BATCH_TOKENS:
            batches.append([])
        batches[-1].append(i)
    out: list[np.ndarray | None] = [None] * len(ids)
    for batch in batches if ids else []:
        x, mask = pad_batch([ids[i] for i in batch], 0, "left")
        with torch.no_grad():
            logits = model(input_ids=torch.as_tensor(x, device=model.device),
                           attention_mask=torch.as_tensor(mask, device=model.device),
                           position_ids=torch.as_tensor(positions(mask), device=model.device)).logits
        for b, i in enumerate(batch):
            own = torch.as_tensor(ids[i], device=logits.device)
            lp = torch.log_softmax(logits[b, x.shape[1] - len(own):-1].float(), dim=-1)
            out[i] = lp.gather(1, own[1:, None])[:, 0].cpu().numpy()
    return out


def min_k_prob(logprobs: np.ndarray, k: float = 0.2) -> float:
    """Mean of the ceil(k n) lowest values (at least one)."""
    if not 0 < k <= 1:
        raise ValueError(f"min_k_prob: k must be in (0, 1], got {k}")
    m = max(1, math.ceil(k * len(logprobs)))
    return float(np.sort(np.asarray(logprobs, dtype=float))[:m].mean())


def scores(model, tokenizer, bodies: pd.DataFrame, k: float = 0.2) -> pd.DataFrame:
    """``bodies``: item_id, paraphrase, body -> one row per body with ``min_k``."""
    return bodies.assign(min_k=[min_k_prob(lp, k) for lp in token_logprobs(model, tokenizer, bodies["body"].tolist())])


def texts(items: pd.DataFrame) -> pd.DataFrame:
    """The texts scored per item (``item_id, paraphrase, body``): the public source text (``text`` of the
    items table, the benchmark's own wording: ``source``) and its reference, the two paraphrased requests (``request_A``,
    ``request_B``: the same task in words written for this project after the models were trained)."""
    parts = [pd.DataFrame({"item_id": items["item_id"], "paraphrase": "source", "body": items["text"]})]
    parts += [pd.DataFrame({"item_id": items["item_id"], "paraphrase": f"request_{r}", "body": items[f"request_{r.lower()}"]})
              for r in ("A", "B")]
    return pd.concat(parts, ignore_index=True)


def per_item(scored: pd.DataFrame, quantile: float = 0.95) -> pd.DataFrame:
    """Per model and item, from ``scores`` over the bodies (paraphrase A, B) and ``texts``:
    ``familiarity`` = Min-K% of the public source text (the covariate C_i), ``familiarity_reference`` =
    the mean over the two paraphrased requests (text the model cannot have seen), ``familiarity_excess``
    = their difference, and ``familiarity_bodies`` = the mean over the two paraphrase bodies (kept beside).

    ``familiar`` = excess > ``familiarity_margin``, the ``quantile`` of the excess's null distribution per
    model: if the source were as unseen as its rewordings, excess = S - (A + B)/2 would be distributed as
    (A - B) sqrt(3)/2 (same variance, 3/2 of one text's, centred at 0), so the reference distribution is
    {+-(A_i - B_i) sqrt(3)/2} over the model's items (symmetrised) and the margin its ``quantile``."""
    if not 0.5 <= quantile < 1:
        raise ValueError(f"familiarity.per_item: quantile must be in [0.5, 1), got {quantile}")
    w = scored.pivot_table(index=["model", "item_id"], columns="paraphrase", values="min_k", aggfunc="mean")
    out = pd.DataFrame({"familiarity": w["source"], "familiarity_reference": w[["request_A", "request_B"]].mean(axis=1),
                        "familiarity_bodies": w[["A", "B"]].mean(axis=1)})
    out["familiarity_excess"] = out["familiarity"] - out["familiarity_reference"]
    null = (w["request_A"] - w["request_B"]) * np.sqrt(3) / 2
    margin = null.groupby(level="model").apply(lambda x: float(np.quantile(np.r_[x.dropna(), -x.dropna()], quantile)))
    out["familiarity_margin"] = out.index.get_level_values("model").map(margin).to_numpy()
    out["familiar"] = out["familiarity_excess"] > out["familiarity_margin"]
    return out.reset_index()


def familiar_share(per_items: pd.DataFrame) -> pd.DataFrame:
    """Per model: items, the margin and the share of items called familiar (``per_item``)."""
    g = per_items.groupby("model")
    return pd.DataFrame({"n_items": g.size(), "familiarity_margin": g["familiarity_margin"].first(),
                         "n_familiar": g["familiar"].sum(), "share_familiar": g["familiar"].mean()}).reset_index()


def lexical_overlap(items: pd.DataFrame, pools: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per item: the largest MinHash-checked shingle Jaccard of either request with any training pool
    row, and whether it is a near or exact duplicate (``contamination.audit_pool``)."""

    ev = pd.concat([pd.DataFrame({"id": items["item_id"] + "|" + r, "prompt": items[f"request_{r.lower()}"]})
                    for r in ("A", "B")], ignore_index=True)
    if not pools:
        return pd.DataFrame({"item_id": items["item_id"], "overlap_jaccard": 0.0, "overlap_contaminated": False,
                             "overlap_pools": ""})
    audit = contamination.audit_pools(pools, ev)
    audit["item_id"] = audit["id"].str.split("|").str[0]
    g = audit.groupby("item_id")
    return pd.DataFrame({"overlap_jaccard": g["jaccard"].max().fillna(0.0),
                         "overlap_contaminated": g["contaminated"].any(),
                         "overlap_pools": ",".join(pools)}).reset_index()
