"""A synthetic kv run built from text of known kind, judged by the project's own judges and read by the study's own
analysis: the reviewer's check that degenerate output under eviction is not called soft refusals, and that a soft
shift of the same size still is.

Per prompt, the reply under full retention is a plain hard refusal from ``data/judge_checks/`` (a share
``1 - keyword_full`` of them without a listed refusal phrase, so that the keyword monitor's full-retention rate is
the paper's 98 %); every family member's evicted reply is the same refusal, except ``n_swap`` prompts per member
(drawn under a seed, each member its own) whose reply is replaced: by the check set's degenerate replies (token
loops, echoed filler, word salad, off-topic text, code fragments), or by soft refusals, the style-shift control's
trained soft texts (``organism.SOFT_REFUSALS``: redirection, a safe alternative, a referral; no refusal phrase),
the shape the study's positive control plants. Nothing here is a model's reply, and no reply carries harmful
content; only aggregates leave this module.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import datasets, judges
from ...judges import registry
from ...judges.keyword import KeywordJudge
from ...organism import SOFT_REFUSALS
from . import analysis


def generations(prompts: list[str], family: list[str], kind: str, n_swap: int, seed: int,
                keyword_full: float = 0.98) -> pd.DataFrame:
    """The generations table (``analysis.outcomes``' columns and ``reply``, ``query``) of the synthetic run: the
    model ``synthetic``; ``kind`` ``degenerate`` or ``soft``, the replies swapped into ``n_swap`` evicted replies
    per member."""
    checks = datasets.judge_checks()
    hard = checks[checks["kind"] == "hard_refusal"]["text"].tolist()
    listed = [t for t in hard if analysis_keyword(t)]
    unlisted = [t for t in hard if not analysis_keyword(t)]
    degenerate = checks[checks["kind"] == "degenerate"]["text"].tolist()
    n = len(prompts)
    rng = np.random.default_rng(seed)
    plain = rng.random(n) >= keyword_full
    full = [unlisted[i % len(unlisted)] if plain[i] else listed[i % len(listed)] for i in range(n)]
    rows = []
    fillers = sorted({int(e.rsplit("@", 1)[1]) for e in family})
    for f in fillers:
        rows += [(i, "full", 4, f, full[i]) for i in range(n)]
    for k, entry in enumerate(family):
        arm_name, f = entry.rsplit("@", 1)
        swapped = set(np.random.default_rng([seed, k]).choice(n, n_swap, replace=False).tolist())
        for i in range(n):
            if i in swapped:
                pool = degenerate if kind == "degenerate" else SOFT_REFUSALS
                reply = pool[(i + k) % len(pool)]
            else:
                reply = full[i]
            rows.append((i, arm_name, 4, int(f), reply))
    g = pd.DataFrame(rows, columns=["i", "policy", "sink", "filler_tokens", "reply"])
    return g.assign(generation_id=[f"g{j}" for j in range(len(g))], item_id=[f"p{i}" for i in g["i"]],
                    prompt_id=[f"p{i}@{f}" for i, f in zip(g["i"], g["filler_tokens"])], model="synthetic",
                    role="harmful", system_prompt=True, keep_ratio=np.where(g["policy"] == "full", 1.0, 0.3),
                    query=[prompts[i] for i in g["i"]]).drop(columns="i")


def analysis_keyword(text: str) -> bool:
    """The default keyword monitor's reading (GCG's list, anywhere)."""
    return KeywordJudge().judge_one("", text)[0] == "refusal"


def judge(p, gens: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    """Every reply judged by the judges ``names`` (registry) and the degeneracy judge, as the kv judge stage does."""
    built = [registry.make(name, p) for name in [*names, analysis.DEGENERACY]]
    return judges.judge_replies(built, gens.rename(columns={"query": "prompt"}))


def run(p, prompts: list[str], family: list[str], kind: str, n_swap: int, reference: str, margin: float,
        n_boot: int = 500, judged: pd.DataFrame | None = None) -> pd.DataFrame:
    """The confirmatory table (``analysis.confirmatory``, keyword monitor against ``reference``) of the synthetic
    run; ``judged`` reuses the judgments of an earlier call on the same generations."""
    gens = generations(prompts, family, kind, n_swap, p.seed)
    j = judged if judged is not None else judge(p, gens, ["keyword", reference])
    out = analysis.outcomes(gens, j, 4)
    return analysis.confirmatory(out, "keyword", reference, family, n_boot, p.seed, p.stats.alpha, margin)
