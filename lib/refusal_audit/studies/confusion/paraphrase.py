"""The LLM paraphraser hook: k paraphrases per seed from a params-named model (``confusion.paraphraser``).

On CPU the paraphrases are data in the repository (``data/confusion/clusters.csv``, written by
hand under five rules, see its SOURCE.md); with a capable model named in params, the same gates
check the paraphrases the shared paraphraser (``refusal_audit.paraphraser``: its instruction, decoding and
cleaning) writes, here as members of each seed's cluster (resumable shards under
``results/<run>/confusion/shards/paraphrases``). An empty or unchanged reply is kept with its reason and
fails the gates like any other paraphrase.
"""
from __future__ import annotations

import pandas as pd

from ...paraphraser import INSTRUCTION, clean, rewrite

__all__ = ["INSTRUCTION", "clean", "paraphrase"]


def paraphrase(model, tokenizer, model_name: str, seeds: pd.DataFrame, k: int, temperature: float,
               max_new_tokens: int, seed: int, shards, batch_rows: int = 32) -> pd.DataFrame:
    """Rows ``member`` 1..k (rule ``llm``) for each seed row (columns of ``clusters.FILE_COLUMNS``),
    in seed order; ``paraphraser_note`` says why a reply gave no usable text."""
    texts = pd.DataFrame({"item_id": seeds["cluster_id"].values, "text": seeds["prompt"].values})
    got = rewrite(model, tokenizer, model_name, texts, k, temperature, max_new_tokens, seed, shards, "confusion",
                  batch_rows).set_index(["item_id", "sample"])
    rows = []
    for _, s in seeds.iterrows():
        for i in range(k):
            g = got.loc[(s["cluster_id"], i + 1)]
            rows.append({**s.to_dict(), "member": i + 1, "rule": "llm", "prompt": g["paraphrase"],
                         "paraphraser_note": g["note"]})
    return pd.DataFrame(rows)
