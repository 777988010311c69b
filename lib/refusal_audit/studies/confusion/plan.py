"""The confusion study's grid for ``make plan`` and its notes (the signal pass's pair bound)."""
from __future__ import annotations

import pandas as pd

from ... import plan as P
from . import defenses as D
from .params import NAME, arms, decision_judges
from .stages import seed_rows


# --- make plan -----------------------------------------------------------------------------------------
def _plan_shape(p) -> tuple[pd.DataFrame, list[int], int]:
    """(seeds, cluster sizes before the gates, tokens per prompt) for ``plan`` and ``plan_notes``."""

    c = p.studies[NAME]
    seeds = seed_rows(p)
    per = P.CHAT_OVERHEAD + P.tokens("x" * round(seeds["prompt"].astype(str).str.len().mean()))
    if c.data.source == "sets":
        return seeds, [1 + c.data.k] * len(seeds), per
    return seeds, seeds.groupby("cluster_id", sort=False).size().tolist(), per


def plan(p) -> pd.DataFrame:
    """The grid from params alone (the seed sets are read to count and measure prompts): the paraphraser's
    k samples per seed (sets source), then per audited model one forward pass (token signals) and one
    greedy reply per prompt, before the gates drop any (an upper bound); the LLM judge's passes."""

    c = p.studies[NAME]
    seeds, sizes, per = _plan_shape(p)
    n = sum(sizes)
    rows = []
    if c.data.source == "sets" and c.paraphraser is not None:
        rows.append(P.row(NAME, c.paraphraser.model, "paraphraser", len(seeds), 1, c.data.k, per + 60,
                          c.paraphraser.max_new_tokens))
    # a defense arm runs on the prompts of its drawn clusters (confusion.defense_clusters); drawn here before the gates,
    # in the run after them: an estimate where the gates drop a whole cluster
    defended = n
    if c.defenses and c.defense_clusters and c.data.source != "sets":
        chosen = D.chosen_clusters(seeds.rename(columns={"cluster_id": "cluster"}), c.defense_clusters, p.seed)
        defended = int(seeds["cluster_id"].isin(chosen).sum())
    for _, m, defense in arms(c):
        what = "" if defense is None else f" ({defense.name})"
        k = n if defense is None else defended
        rows.append(P.row(NAME, m, "token signals" + what, k, 1, 0, per, 0))
        rows.append(P.row(NAME, m, "replies" + what, k, 1, 1, per, c.max_new_tokens))
    asked = [j[4:] for j in decision_judges(p) if j.startswith("llm_")]
    judged = n * len(c.models) + defended * len(c.defenses)
    return P.frame(rows + P.judge_rows(p, NAME, judged, per, c.max_new_tokens, asked))


def plan_notes(p) -> list[str]:
    """``make plan``: what the CI over N_k(r) needs per model, before the gates (upper bounds): the signal
    pass (one forward pass per prompt), the signal pairs (``plan.signal_pairs_bound``), their CPU hours at
    the model's vocabulary while the model stays loaded, the RAM its signals take, and the N_k pairs per arm."""

    c = p.studies[NAME]
    _, sizes, per = _plan_shape(p)
    n, bound = sum(sizes), P.signal_pairs_bound(sizes, c.metrics.cover)
    within = bound - n * c.metrics.cover
    arms = (len(c.models) + len(c.defenses)) * len(decision_judges(p))
    lines = [f"confusion: per model, {n:,} prompts: {n:,} signal passes ({-(-n // c.signal_batch):,} batches of "
             f"signal_batch {c.signal_batch}; GPU hours in the 'token signals' rows) and at most {bound:,} signal "
             f"pairs ({within:,} within clusters + {n:,} prompts x cover {c.metrics.cover}; cross-cluster pairs "
             f"above theta outside every cover not counted), computed on one CPU core while the model stays loaded",
             f"confusion: N_k pairs (the CI's, all among the signal pairs): at most {n:,} x k {c.metrics.k} = "
             f"{n * c.metrics.k:,} per arm, {arms} arms ((models + defenses) x decision judges)"]
    held, hours = 0, 0.0
    for m in c.models:
        vocab, hidden, source = P.signal_shape(p.models[m])
        held += P.signals_bytes(n, per, vocab, hidden)
        hours += P.pair_cpu_hours(bound, vocab)
        lines.append(f"confusion: {m}: vocabulary {vocab:,}, hidden {hidden:,} ({source}): signal pairs <= "
                     f"{P.pair_cpu_hours(bound, vocab):.3g} CPU hours; signals held "
                     f"{P.signals_bytes(n, per, vocab, hidden) / 2**30:.1f} GiB ({per} tokens a prompt, float32)")
    lines.append(f"confusion: the generation stage's signal cache (token_signals) keeps every model's signals until "
                 f"the stage ends: {held / 2**30:.1f} GiB of RAM for all {len(c.models)} models; their signal pairs "
                 f"<= {hours:.3g} CPU hours on one core, on the machine that holds the GPU")
    return lines
