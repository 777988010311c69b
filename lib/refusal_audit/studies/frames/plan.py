"""The frames study's grid for ``make plan``: prompts x decodes per model, at the declared roster."""
from __future__ import annotations

import pandas as pd

from ... import generation
from ... import plan as P
from .params import NAME, NULL, PARAPHRASES, reference
from .stages import items


# --- make plan -----------------------------------------------------------------------------------------
def plan(p) -> pd.DataFrame:
    """The grid from params alone (the items file is read to count and measure items): per model, items x
    paraphrases x frames prompts, each decoded under the whole grid; the reference model's calibration
    pass over every drawn candidate (the grid reuses the selected items' rows when the reference model is
    one of the models); the familiarity pass (one forward pass per body)."""

    fr = p.studies[NAME]
    it = items(p)
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
    return P.frame(rows)
