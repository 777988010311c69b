"""The frames study's grid for ``make plan``: prompts x decodes per model, at the declared roster."""
from __future__ import annotations

import math

import pandas as pd

from ... import generation
from ... import plan as P
from ...paraphraser import INSTRUCTION
from .params import NAME, NULL, PARAPHRASES, pairs_of, reference, second_judges
from .stages import items


# --- make plan -----------------------------------------------------------------------------------------
def plan(p) -> pd.DataFrame:
    """The grid from params alone (the items file is read to count and measure items): per model, items x
    paraphrases x frames prompts, each decoded under the whole grid; the reference model's calibration
    pass over every drawn candidate (the grid reuses the selected items' rows when the reference model is
    one of the models); the familiarity pass (one forward pass per body)."""

    fr = p.studies[NAME]
    it = items(p, llm=False)
    texts = pd.concat([it["paraphrase_a"], it["paraphrase_b"]]).astype(str)
    body = P.tokens("x" * round(texts.str.len().mean()))  # the mean body, in tokens
    frame_tokens = max(P.tokens(f) for f in fr.frames.values())
    per = P.CHAT_OVERHEAD + P.tokens(fr.wrapper) + frame_tokens + body
    decodes = len(generation.decoding_grid(fr.temperatures, fr.seeds, fr.max_new_tokens))
    pool = len(it) * len(PARAPHRASES)
    n = sum(fr.data.counts().values()) * len(PARAPHRASES)
    rows = []
    calibrated = pool if reference(fr) not in fr.models else pool - n  # the selected items' rows are the grid's
    if calibrated:
        rows.append(P.row(NAME, reference(fr), "calibration", calibrated, 1, decodes, per, fr.max_new_tokens))
    for m in fr.models:
        rows.append(P.row(NAME, m, "grid", n * len(fr.frames), 1, decodes, per, fr.max_new_tokens))
        rows.append(P.row(NAME, m, "familiarity", n, 1, 0, body, 0))
    sampled = len(generation.decoding_grid(fr.temperatures, fr.seeds, fr.max_new_tokens)) - 1  # the greedy rows are cached
    for m in fr.null_control:  # the reference frame's prompts under the other frame labels, other sampling seeds
        rows.append(P.row(NAME, f"{m}{NULL}", "null control", n * (len(fr.frames) - 1), 1, sampled, per, fr.max_new_tokens))
    return P.frame(_llm_rows(p, it, n, decodes, sampled, body) + rows)


def _llm_rows(p, it, n: int, decodes: int, sampled: int, body: int) -> list[dict]:
    """The params-named LLM roles: the paraphraser (two samples per drawn candidate), the equivalence scorer (one
    forward pass per item), the LLM and guard judges over every reply of the grid and the null control, the
    rubric (one forward pass per reply pair of its subsample)."""
    fr = p.studies[NAME]
    rows = []
    request = P.tokens("x" * round(it["text"].astype(str).str.len().mean())) if len(it) else 0
    if fr.paraphraser is not None:
        rows.append(P.row(NAME, fr.paraphraser.model, "paraphraser", len(it), 1, 2,
                          P.CHAT_OVERHEAD + P.tokens(INSTRUCTION) + request, fr.paraphraser.max_new_tokens))
    if fr.equivalence_scorer is not None:
        rows.append(P.row(NAME, fr.equivalence_scorer, "equivalence score", len(it), 1, 0, 300 + 2 * request, 0))
    replies = n * len(fr.frames) * decodes * len(fr.models) + n * (len(fr.frames) - 1) * sampled * len(fr.null_control)
    asked = [j[4:] for j in [fr.outcome_judge, *second_judges(fr)] if j.startswith("llm_")]
    rows += P.judge_rows(p, NAME, replies, request, fr.max_new_tokens, asked)
    guard = p.judges.llama_guard_3
    if guard is not None and "llama_guard_3" in second_judges(fr):
        rows.append(P.row(NAME, guard.model, "judge llama_guard_3", replies, 1, 1,
                          400 + request + min(fr.max_new_tokens, guard.max_reply_tokens), guard.max_new_tokens))
    if fr.rubric is not None:
        chosen = sum(max(1, math.ceil(fr.rubric.share * k)) for k in fr.data.counts().values())
        pairs = chosen * len(fr.models) * (len(pairs_of(list(fr.frames))) * len(PARAPHRASES) + len(fr.frames))
        rows.append(P.row(NAME, fr.rubric.model, "rubric", pairs, 1, 0,
                          300 + 2 * min(fr.max_new_tokens, fr.rubric.max_reply_tokens), 0))
    return rows
