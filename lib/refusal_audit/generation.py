"""Generation under KV retention: ONE prefill per prompt, every policy decodes from its own copy.

Decoded tokens take positions that continue from the ORIGINAL prompt length, not from the
shortened cache (transformers 5 would otherwise place them at the cache length, shifting every
rotary position after eviction). Results are written as one shard per (model, prompt, policy,
decoding), so a rerun skips finished work and an interrupted run loses only the row in flight.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import pandas as pd
import torch
from tqdm.auto import tqdm

from . import retention
from .attention import attention_hook
from .retention import Prefill, RetentionPolicy
from .store import ShardStore, shard_key

GENERATION_COLUMNS = ["generation_id", "prompt_id", "item_id", "study", "role", "model", "policy", "keep_ratio",
                      "sink", "filler_tokens", "system_prompt", "frame", "paraphrase", "temperature", "seed",
                      "query", "reply", "new_tokens", "finish", "prompt_tokens", "kept_positions"]


@torch.no_grad()
def prefill(model, input_ids: list[int], capture_window: int = 0) -> Prefill:
    """Run the prompt once; optionally record the last ``capture_window`` queries' attention (SnapKV)."""
    ids = torch.tensor([input_ids], device=model.device)
    n = ids.shape[1]
    scores: list[torch.Tensor] = []

    def record(layer_idx, query, key, mask):
        if query.shape[2] == n:
            scores.append(retention.window_scores(query.float(), key.float(), capture_window)[0].cpu())

    with attention_hook(model, record) if capture_window else nullcontext():
        out = model(input_ids=ids, use_cache=True)
    return Prefill(out.cache, n, scores or None, out.logits[0, -1].float())


@torch.no_grad()
def step(model, cache, token_ids: list[int], start: int) -> torch.Tensor:
    """Feed ``token_ids`` at positions ``start, start+1, ...``; returns the logits of the last one."""
    ids = torch.tensor([token_ids], device=model.device)
    pos = torch.arange(start, start + len(token_ids), device=model.device)[None]
    return model(input_ids=ids, cache=cache, position_ids=pos, use_cache=True).logits[0, -1].float()


@torch.no_grad()
def decode_greedy(model, pre: Prefill, keep: torch.Tensor | None, max_new_tokens: int,
                  eos_ids: set[int]) -> tuple[list[int], str]:
    """Greedy tokens from an evicted copy of the prefill cache; returns (tokens, "eos" | "length")."""
    cache = retention.evict(pre.cache, keep)
    token = int(pre.last_logits.argmax())
    out = [token]
    pos = pre.length
    while token not in eos_ids and len(out) < max_new_tokens:
        token = int(step(model, cache, [token], pos).argmax())
        pos += 1
        out.append(token)
    return out, ("eos" if token in eos_ids else "length")


@torch.no_grad()
def choose_after_cue(model, pre: Prefill, keep: torch.Tensor | None, cue_ids: list[int],
                     choice_ids: list[int]) -> int:
    """Feed ``cue_ids`` under the evicted cache, return the index of the most likely choice token."""
    cache = retention.evict(pre.cache, keep)
    logits = step(model, cache, cue_ids, pre.length)
    return int(logits[choice_ids].argmax())


def eos_token_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    return ids | {tokenizer.eos_token_id}


def row_key(model_name: str, prompt: pd.Series, policy: RetentionPolicy, decoding: dict) -> str:
    return shard_key(model=model_name, input_ids=list(map(int, prompt["input_ids"])), policy=policy.name,
                     policy_params=vars(policy), decoding=decoding)


def check_plan(prompts: pd.DataFrame, policies_of: Callable[[pd.Series], list[RetentionPolicy]],
               context_window: int | None, max_new_tokens: int) -> None:
    """Every (prompt, policy) pair must be runnable: raise before any work if one is not."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    for _, p in prompts.iterrows():
        n = int(p["prompt_tokens"])
        if context_window and n + max_new_tokens > context_window:
            raise ValueError(f"prompt {p['prompt_id']} (item {p['item_id']!r}): {n} tokens + {max_new_tokens} new "
                             f"exceed the context window {context_window}")
        for policy in policies_of(p):
            policy.check(n)


def run(model, tokenizer, model_name: str, prompts: pd.DataFrame,
        policies_of: Callable[[pd.Series], list[RetentionPolicy]], store: ShardStore, max_new_tokens: int,
        answer_cue: tuple[list[int], list[str]] | None = None, seed: int = 0) -> pd.DataFrame:
    """Generate every (prompt, policy) row not already in ``store``; return all rows in plan order.

    With ``answer_cue=(cue_ids, choices)``, each row's reply is the choice (e.g. an MMLU letter)
    whose token is most likely after the cue, decoded under the same retention.
    """
    context = getattr(model.config, "max_position_embeddings", None)
    check_plan(prompts, policies_of, context, 1 if answer_cue else max_new_tokens)
    decoding = ({"mode": "choice", "cue": answer_cue[0], "choices": answer_cue[1]} if answer_cue
                else {"mode": "greedy", "temperature": 0.0, "max_new_tokens": max_new_tokens})
    if answer_cue:
        choice_ids = [tokenizer.encode(" " + c, add_special_tokens=False)[-1] for c in answer_cue[1]]
    eos = eos_token_ids(model, tokenizer)
    plan = [(p, pol, row_key(model_name, p, pol, decoding)) for _, p in prompts.iterrows() for pol in policies_of(p)]
    todo = [x for x in plan if not store.has(x[2])]
    bar = tqdm(total=len(plan), initial=len(plan) - len(todo), desc=f"generate {model_name}", unit="row")
    by_prompt: dict[str, list] = {}
    for p, pol, key in todo:
        by_prompt.setdefault(p["prompt_id"], []).append((p, pol, key))
    for group in by_prompt.values():
        p = group[0][0]
        window = max((pol.window for _, pol, _ in group if pol.needs_window_attention), default=0)
        pre = prefill(model, list(p["input_ids"]), capture_window=window)
        for _, pol, key in group:
            keep = pol.select(pre)
            if answer_cue:
                reply, new, finish = answer_cue[1][choose_after_cue(model, pre, keep, answer_cue[0], choice_ids)], 1, "choice"
            else:
                tokens, finish = decode_greedy(model, pre, keep, max_new_tokens, eos)
                reply, new = tokenizer.decode(tokens, skip_special_tokens=True), len(tokens)
            store.put(key, pd.DataFrame([{
                "generation_id": key, "prompt_id": p["prompt_id"], "item_id": p["item_id"], "study": p["study"],
                "role": p["role"], "model": model_name, "policy": pol.name, "keep_ratio": float(pol.keep_ratio),
                "sink": int(pol.sink), "filler_tokens": int(p["filler_tokens"]),
                "system_prompt": bool(p["system_prompt"]), "frame": p.get("frame"), "paraphrase": p.get("paraphrase"),
                "temperature": 0.0, "seed": seed, "query": p["query"], "reply": reply, "new_tokens": new, "finish": finish,
                "prompt_tokens": int(p["prompt_tokens"]),
                "kept_positions": pre.length if keep is None else int(keep.shape[-1]),
            }], columns=GENERATION_COLUMNS))
            bar.update()
    bar.close()
    return store.collect([k for _, _, k in plan])
