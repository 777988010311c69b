"""``make plan`` for the kv study: its grid from params alone."""
from __future__ import annotations

import pandas as pd

from ... import plan as P
from . import design
from .params import NAME, model_names


def grid(p) -> pd.DataFrame:
    """The grid from params alone: per condition, prompts x its policies x one greedy decoding (the
    filler and system text, shared by a condition's prompts, prefilled once); the LLM judge's passes."""

    kv = p.studies[NAME]
    d = kv.data
    counts = {"harmful": d.n_harmful, "harmful_official": d.n_official,
              "mmlu": d.mmlu_per_subject * len(d.mmlu_subjects)}
    query = {"harmful": 25, "harmful_official": 25, "mmlu": 120}  # tokens: a behaviour; a question and four options
    rows, replies = [], 0
    for m in model_names(kv):
        for c in design.conditions(kv, {role for role, n in counts.items() if n}):
            shared = c.filler_tokens + (P.tokens(kv.system_prompt) if c.system_prompt else 0)
            policies = design.policies(kv, c.role, c.filler_tokens, c.system_prompt)
            new = 1 if c.role == "mmlu" else kv.max_new_tokens
            part = f"{c.role} filler {c.filler_tokens}" + ("" if c.system_prompt else " no system")
            r = P.row(NAME, m, part, counts[c.role], len(policies), 1, P.CHAT_OVERHEAD + shared + query[c.role], new,
                      shared)
            rows.append(r)
            replies += r["generations"] if c.role != "mmlu" else 0
    return P.frame(rows + P.judge_rows(p, NAME, replies, query["harmful"], kv.max_new_tokens))
