"""The confusion seed's own figures as this run has them (``data/published/confusion.csv`` beside them). The
seed states no result number (no Confusion Rate, Index or Depth of any model); it states its corpus (ParaGuard,
10k prompts in paraphrase clusters) and its neighbourhood (k = 5): the run's corpus (the prompts kept by the
gates, ``prompts``) and the neighbourhood its metrics use stand beside them."""
from __future__ import annotations

import pandas as pd

from ..contract import Measurement
from .params import NAME

MEASURES = {"corpus_prompts": "prompts", "neighbours_k": "neighbours"}


def measured(p, tables: dict[str, pd.DataFrame]) -> list[Measurement]:
    """The run's corpus size (distinct prompts of the first model's decisions) and its metrics' k."""
    out = [Measurement("neighbours_k", "this run's metrics", float(p.studies[NAME].metrics.k),
                       note="a setting of the run, not a measurement")]
    prompts = tables.get("prompts")
    if prompts is not None and len(prompts):
        first = prompts[prompts["model"] == prompts["model"].iloc[0]]
        out.insert(0, Measurement("corpus_prompts", "this run's corpus", float(first["item_id"].nunique()),
                                  note=f"{first['cluster'].nunique()} clusters after the gates"))
    return out
