"""Generation under KV retention: ONE prefill per prompt, every policy decodes from its own copy.

Prompts are prefilled in token order. A prompt that needs window attention (SnapKV) is prefilled
alone and reuses the stretch of tokens it shares with the previous prompt (the kv study's prompts
all open with the same template, system text and filler), running only the rest. The others are
prefilled together, left-padded, up to ``PREFILL_BATCH_TOKENS`` padded tokens, grouped by their
longest shared opening (the chat template's header; the frames study's frame text), which each batch
computes once: on CPU a forward pass reads every weight once however few tokens it carries (~0.1 s
for the 135M model), so one pass per 44-token prompt cost more than the prompt's arithmetic. Each
policy's evicted copy of the cache becomes one row of a decode batch; rows of similar cache length
(of many prompts and policies) decode together, left-padded to a common length with masked padding,
into caches preallocated for the new tokens. Positions that every row of a batch holds alike (the kv
study's full-retention rows share their template, system text and filler) are kept once for the
batch and attended once, as one matmul of all the rows' queries (``attention.attend_after_prefix``).
Each row's new tokens take positions that continue from ITS OWN original prompt length, not from
the shortened or padded cache (transformers 5 would otherwise place them at the cache length,
shifting every rotary position after eviction). A row stops at EOS or ``max_new_tokens``.

Sampling: a row at temperature T > 0 draws each token from its own ``torch.Generator``, seeded
from (prompt, policy, temperature, seed), so its random draws do not depend on its batch. Its logits
do, at float rounding: on CPU neither the matmuls nor SDPA are bitwise invariant to the batch size
or the padding (a row's attention output moves by ~1e-7 with its padding), so "the same tokens in
any batch" is what the tests and the benchmark measure, not a bitwise guarantee.

Results are written as one shard per (model, prompt tokens, policy, decoding) as each batch
finishes, so a rerun skips finished work and an interrupted run loses only rows not yet decoded.
A shard holds what was generated; the table returned has one row per plan entry, each with its own
identity (``generation_id``, prompt, item) and the columns its study carries (its condition), so two
prompts with the same tokens share one generation and are still reported as themselves.
"""
from __future__ import annotations

import ctypes
import hashlib
import math
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import psutil
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from . import progress, retention
from .attention import attention_hook, layer_scales, shared_prefix_attention
from .models import attention_span
from .padding import pad_batch, positions
from .retention import Prefill, RetentionPolicy
from .store import ShardStore, shard_key

# The engine's core schema: the columns every generation has, whatever study asked for it (DESIGN.md). A study
# adds its own columns (condition, frame, paraphrase, ...) beside them with ``carry``, never into the core.
CORE_COLUMNS = ["generation_id", "prompt_id", "item_id", "model", "policy", "keep_ratio", "sink", "temperature",
                "seed", "reply", "prompt_tokens", "kept_positions", "new_tokens", "finish"]


def columns(carry: tuple[str, ...] | list[str] = ()) -> list[str]:
    """A generations table's columns: the core schema, then the prompt columns a study carries."""
    extra = [c for c in carry if c in CORE_COLUMNS]
    if extra:
        raise ValueError(f"carry: {extra} are core columns (generation.CORE_COLUMNS); a study adds only its own")
    return CORE_COLUMNS + list(carry)


def keep_freed_memory(threshold: int = 2**30) -> bool:
    """Have glibc's malloc keep freed blocks of up to ``threshold`` bytes for reuse instead of handing them
    back to the system (by default every block over 32 MB is a fresh ``mmap``, faulted in and zeroed page
    by page). A decode batch's buffers are 10-60 MB a layer: on the reference machine (a virtual machine)
    copying into fresh blocks ran at 2.5-3 GB/s, into reused ones at 35 GB/s. Process-wide: freed memory
    stays with the process, which keeps its peak. False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, threshold)) and bool(mallopt(m_trim_threshold, 2 * threshold))


@dataclass(frozen=True)
class Decoding:
    """How a row is decoded: greedy (temperature 0) or sampled at ``temperature`` under ``seed``."""

    temperature: float = 0.0
    seed: int = 0
    max_new_tokens: int = 64

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")


def decoding_grid(temperatures: list[float], seeds: list[int], max_new_tokens: int) -> list[Decoding]:
    """Temperature 0 once, every other temperature once per seed (the frames study's 1 + 2 x 3 = 7)."""
    grid = []
    for t in temperatures:
        grid += [Decoding(0.0, 0, max_new_tokens)] if t == 0 else [Decoding(t, s, max_new_tokens) for s in seeds]
    return list(dict.fromkeys(grid))


MIN_SHARED_PREFIX = 64  # shorter common prefixes are recomputed, or in a decode batch copied into every row:
#                         sharing them would save less than it costs
PREFILL_BATCH_TOKENS = 4096  # padded tokens (prompts x the longest) per batched prefill
PREFILL_BATCH_PROMPTS = 64
PREFILL_PAD_RATIO = 1.5  # a batch's longest prompt at most this times its shortest (padding is computed too)
MIN_BATCH_HEAD = 8  # a batch's common opening of at least this many tokens is computed once for the batch


def shared_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _crop(cache, length: int):
    """A new cache holding the first ``length`` positions of ``cache`` (views; ``cache`` is left untouched)."""
    return retention.cache_of((layer.keys[:, :, :length], layer.values[:, :, :length]) for layer in cache.layers)


def reused_positions(previous: list[int] | None, input_ids: list[int], capture_window: int = 0) -> int:
    """How many leading positions a prefill of ``input_ids`` takes from the previous prompt's cache:
    their shared prefix, less the positions computed here in any case (the window, the last one);
    0 below ``MIN_SHARED_PREFIX``."""
    if previous is None:
        return 0
    start = min(shared_prefix(previous, input_ids), len(input_ids) - max(capture_window, 1))
    return start if start >= MIN_SHARED_PREFIX else 0


def prefill_batches(order: list[tuple], windows: dict[tuple, int]) -> list[list[tuple]]:
    """``order`` (prompts' token tuples, in token order) cut into prefill batches. A prompt that needs
    window attention (SnapKV) is a batch of its own, after every prompt before it (it reuses the
    previous prompt's cache). Each run of other prompts between two such is split by its longest
    opening that leaves no more groups than batches (``group_depth``: the chat header and the frame
    text of the frames study, the template, system text and filler of the kv study's), which each
    batch computes once; each group is sorted by length (less padding) and cut into batches of at
    most ``PREFILL_BATCH_PROMPTS`` prompts and ``PREFILL_BATCH_TOKENS`` padded tokens after that
    opening, the longest at most ``PREFILL_PAD_RATIO`` times the shortest. (A batched prompt costs its
    tokens after the opening; one reusing its predecessor's cache alone costs fewer tokens but a
    forward pass of its own, ~0.1 s on two cores for the 135M model.)"""
    alone = [windows[ids] > 0 for ids in order]
    batches: list[list[tuple]] = []
    run: list[tuple] = []

    def close():
        first = len(batches)  # this run's batches start here
        g = group_depth(run, math.ceil(len(run) / PREFILL_BATCH_PROMPTS))
        for ids in sorted(run, key=lambda x: (x[:g], len(x))):
            last = batches[-1] if len(batches) > first else None
            if (last is None or ids[:g] != last[0][:g] or len(last) >= PREFILL_BATCH_PROMPTS
                    or len(ids) > PREFILL_PAD_RATIO * len(last[0]) or (len(last) + 1) * (len(ids) - g) > PREFILL_BATCH_TOKENS):
                batches.append([ids])
            else:
                last.append(ids)
        run.clear()

    for ids, single in zip(order, alone):
        if single:
            close()
            batches.append([ids])
        else:
            run.append(ids)
    close()
    return batches


def group_depth(prompts: list[tuple], groups: int) -> int:
    """The longest opening (in tokens, shorter than every prompt) with at most ``groups`` distinct values
    among ``prompts`` (0 when even their first tokens differ more)."""
    lo, hi = 0, min(map(len, prompts), default=1) - 1
    while lo < hi:  # the number of distinct openings only grows with their length
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len({x[:mid] for x in prompts}) <= groups else (lo, mid - 1)
    return lo


def head_length(prompts: list[list[int]]) -> int:
    """How many leading tokens every prompt of a batch shares and keeps out of its own part (each keeps
    at least one token): the batch computes them once; 0 below ``MIN_BATCH_HEAD``."""
    n = min(min((shared_prefix(prompts[0], p) for p in prompts[1:]), default=0), min(map(len, prompts)) - 1)
    return n if n >= MIN_BATCH_HEAD else 0


def repeated(cache, rows: int):
    """A cache of one sequence as ``rows`` rows (expanded views; a forward pass over it writes new tensors)."""
    return retention.cache_of((kv.keys.expand(rows, -1, -1, -1), kv.values.expand(rows, -1, -1, -1))
                              for kv in cache.layers)


@torch.no_grad()
def prefill_batch(model, prompts: list[list[int]]) -> list[Prefill]:
    """``prefill`` of several prompts (no reuse, no window) in one left-padded forward pass: each
    prompt's positions start at 0 and its padding is masked, so each Prefill holds that prompt's own
    cache (padding cut off) and last logits, equal to ``prefill``'s up to float rounding. The tokens
    every prompt opens with (a chat template's header: a third to a half of a short chat prompt) are
    computed once, and the rest of each prompt attends to that one copy."""
    if len(prompts) == 1:
        return [prefill(model, prompts[0])]
    head = head_length(prompts)
    past = repeated(prefill(model, prompts[0][:head]).cache, len(prompts)) if head else None
    ids, mask = pad_batch([p[head:] for p in prompts], 0, "left")
    width = ids.shape[1]
    full_mask = np.concatenate([np.ones((len(prompts), head), dtype=mask.dtype), mask], axis=1)
    out = model(input_ids=torch.as_tensor(ids, device=model.device),
                attention_mask=torch.as_tensor(full_mask, device=model.device),
                position_ids=torch.as_tensor(head + positions(mask), device=model.device), cache=past,
                use_cache=True, logits_to_keep=1)
    result = []
    for i, p in enumerate(prompts):
        own = slice(head + width - (len(p) - head), head + width)
        cache = retention.cache_of(  # copies: a view would keep the whole batch alive
            (torch.cat([kv.keys[i:i + 1, :, :head], kv.keys[i:i + 1, :, own]], dim=2),
             torch.cat([kv.values[i:i + 1, :, :head], kv.values[i:i + 1, :, own]], dim=2)) for kv in out.cache.layers)
        result.append(Prefill(cache, len(p), None, out.logits[i, -1].float().clone(), list(p)))
    return result


@torch.no_grad()
def prefill(model, input_ids: list[int], capture_window: int = 0, reuse: Prefill | None = None) -> Prefill:
    """Run the prompt once; optionally record the last ``capture_window`` queries' attention (SnapKV).

    With ``reuse`` (an earlier prompt's prefill), the positions both prompts share are taken from its
    cache and only the rest is computed; the last ``max(capture_window, 1)`` positions are always
    computed here, so the window's attention and the last logits come from this forward pass.
    """
    n = len(input_ids)
    start = reused_positions(reuse.input_ids if reuse is not None else None, input_ids, capture_window)
    ids = torch.tensor([input_ids[start:]], device=model.device)
    scores: list[torch.Tensor] = []
    scales = layer_scales(model) if capture_window else {}

    def record(layer_idx, query, key, mask):
        if query.shape[2] == n - start and key.shape[2] == n:
            scaling, softcap = scales.get(layer_idx, (None, None))
            if scaling is not None and math.isclose(scaling, query.shape[-1] ** -0.5, rel_tol=1e-6):
                scaling = None  # the standard scale, computed as before (bit-identical selections)
            scores.append(retention.window_scores(query.float(), key.float(), capture_window, scaling, softcap)[0].cpu())

    with attention_hook(model, record) if capture_window else nullcontext():
        # logits of the last position only: all of them would cost a vocabulary-sized matmul per position
        # (a quarter of a 135M model's prefill) and 0.4 GB at 2k tokens, kept alive by any view of them
        out = model(input_ids=ids, cache=_crop(reuse.cache, start) if start else None,
                    position_ids=torch.arange(start, n, device=model.device)[None], use_cache=True,
                    logits_to_keep=1)
    return Prefill(out.cache, n, scores or None, out.logits[0, -1].float().clone(), list(input_ids))


@dataclass
class Row:
    """One row of a decode batch: an evicted cache, where its positions continue, how it samples."""

    cache: object
    start: int  # the original prompt length: the first new token's position
    first_logits: torch.Tensor
    decoding: Decoding
    sample_key: str = ""
    tokens: list[int] = field(default_factory=list)


def _generator(row: Row) -> torch.Generator | None:
    if row.decoding.temperature == 0:
        return None
    seed = int.from_bytes(hashlib.sha256(f"{row.sample_key}|{row.decoding.seed}".encode()).digest()[:8], "little")
    return torch.Generator().manual_seed(seed)


def _pick(logits: torch.Tensor, rows: list[Row], gens: list[torch.Generator | None]) -> list[int]:
    """The next token of every row at once (``logits``: one row each): the argmax for greedy rows; for
    sampled rows, inverse-CDF sampling of softmax(logits / T) with one uniform draw from the row's own
    generator, so that a row's draws do not depend on its batch (one vocabulary-sized multinomial call
    per row cost an eighth of a sampled decode)."""
    picks = logits.argmax(-1).cpu()
    sampled = [j for j, g in enumerate(gens) if g is not None]
    if sampled:
        temps = torch.tensor([rows[j].decoding.temperature for j in sampled], dtype=torch.float32)[:, None]
        cdf = (logits[sampled].float().cpu() / temps).softmax(-1).cumsum(-1)
        u = torch.cat([torch.rand(1, generator=gens[j], dtype=torch.float64) for j in sampled])
        drawn = torch.searchsorted(cdf, (u[:, None] * cdf[:, -1:].double()).float())
        picks[sampled] = drawn[:, 0].clamp_max(cdf.shape[-1] - 1)
    return picks.tolist()


class _PreallocatedLayer(DynamicLayer):
    """A cache layer over a buffer with room for the new tokens: a decode step writes its position in
    place. ``DynamicLayer.update`` concatenates, copying every row's whole cache at every step, and
    at 2k context that copy, not the arithmetic, dominated batched decoding. Hand-written because
    transformers' StaticCache assumes one cache length shared by the batch and its own positions."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int, prefix: tuple | None = None):
        super().__init__()
        self._k, self._v, self._n = keys, values, length
        self.prefix = prefix  # (keys, values) every row shares before its own positions, or None
        self.is_initialized, self.device = True, keys.device
        self._view()

    def _view(self):
        self.keys, self.values = self._k[:, :, : self._n], self._v[:, :, : self._n]

    def update(self, key_states, value_states, *args, **kwargs):
        m = key_states.shape[2]
        if self._n + m > self._k.shape[2]:
            raise RuntimeError(f"decode cache full: {self._n} + {m} positions, room for {self._k.shape[2]}")
        self._k[:, :, self._n: self._n + m] = key_states
        self._v[:, :, self._n: self._n + m] = value_states
        self._n += m
        self._view()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._view()


def shared_positions(caches: list) -> int:
    """How many leading positions hold the same keys and values in every row's cache, in every layer
    (compared bitwise: prompts sharing an opening share these positions' values when one prefill reused
    the other's, as the engine's do); 0 for one row or below ``MIN_SHARED_PREFIX``."""
    if len(caches) < 2:
        return 0
    n = min(c.layers[0].keys.shape[2] for c in caches)
    first = caches[0].layers
    for layer in range(len(first)):
        for c in caches[1:]:
            for x, y in ((first[layer].keys, c.layers[layer].keys), (first[layer].values, c.layers[layer].values)):
                if n < MIN_SHARED_PREFIX:
                    return 0
                x, y = x[0, :, :n], y[0, :, :n]
                if (x.data_ptr() == y.data_ptr() and x.stride() == y.stride()) or torch.equal(x, y):
                    continue
                n = int((x == y).all(dim=2).all(dim=0).long().argmin())  # the first position that differs
    return n if n >= MIN_SHARED_PREFIX else 0


def _stack(caches: list, device, room: int = 0, shared: int = 0) -> tuple[object, torch.Tensor]:
    """One batched cache from per-row caches of different lengths, left-padded (masked), with ``room``
    free positions after them for the new tokens; and its attention mask. Each row's positions are
    copied once, straight into the batch's buffers (``pad_sequence`` made a zero-filled, transposed
    intermediate: two more copies of the whole batch, 10-11 s of an 80 s engine run of the generation
    benchmark, now 0.5-1.3 s). With ``shared`` (``shared_positions``), each layer keeps the first
    ``shared`` positions once, as its ``prefix`` (views of the first row's cache), and the buffers and
    mask hold each row's positions after them."""

    lengths = [c.layers[0].keys.shape[2] - shared for c in caches]
    width = max(lengths)
    mask = torch.zeros(len(caches), width, dtype=torch.long, device=device)
    for i, n in enumerate(lengths):
        mask[i, width - n:] = 1
    out = DynamicCache()
    for layer in range(len(caches[0].layers)):
        first = caches[0].layers[layer].keys
        # the room is written before it is read; padding is zeroed (masked, but uninitialised memory may
        # hold a NaN, and a masked NaN still poisons the weighted sum of values)
        keys = first.new_empty((len(caches), first.shape[1], width + room, first.shape[3]))
        values = torch.empty_like(keys)
        for i, (c, n) in enumerate(zip(caches, lengths)):
            for buffer, part in ((keys, c.layers[layer].keys), (values, c.layers[layer].values)):
                if n < width:
                    buffer[i, :, :width - n] = 0
                buffer[i, :, width - n:width] = part[0, :, shared:]
        prefix = caches[0].layers[layer]
        out.layers.append(_PreallocatedLayer(keys, values, width, (prefix.keys[:, :, :shared],
                                                                   prefix.values[:, :, :shared]) if shared else None))
    return out, mask


def prefixes_of(cache) -> dict[int, tuple]:
    """A stacked cache's shared prefixes by layer (``_stack``), as ``attention.shared_prefix_attention`` takes them."""
    return {i: layer.prefix for i, layer in enumerate(cache.layers) if layer.prefix is not None}


@torch.no_grad()
def decode(model, rows: list[Row], eos_ids: set[int]) -> list[tuple[list[int], str]]:
    """Decode every row together; returns (tokens, "eos" | "length") per row, in order. The rows'
    caches are consumed (copied into the batch, then released). Positions every row's cache holds
    alike (``shared_positions``) are kept and attended once for the batch (``attention.shared_prefix_attention``)."""
    gens = [_generator(r) for r in rows]
    for r, token in zip(rows, _pick(torch.stack([r.first_logits for r in rows]), rows, gens)):
        r.tokens = [token]
    live = [i for i, r in enumerate(rows) if r.tokens[-1] not in eos_ids and r.decoding.max_new_tokens > 1]
    if live:
        room = max(rows[i].decoding.max_new_tokens for i in live)
        shared = shared_positions([rows[i].cache for i in live])
        cache, mask = _stack([rows[i].cache for i in live], model.device, room, shared)
        for i in live:  # the batch holds its own copy: free the row's
            rows[i].cache = None
        with shared_prefix_attention(model, prefixes_of(cache)) if shared else nullcontext():
            _decode_steps(model, rows, live, gens, cache, mask, eos_ids)
    return [(r.tokens, "eos" if r.tokens[-1] in eos_ids else "length") for r in rows]


def _decode_steps(model, rows: list[Row], live: list[int], gens: list, cache, mask: torch.Tensor,
                  eos_ids: set[int]) -> None:
    """The batch's steps: each live row's last token in, its next token appended, until every row stops."""
    while live:
        ids = torch.tensor([[rows[i].tokens[-1]] for i in live], device=model.device)
        pos = torch.tensor([[rows[i].start + len(rows[i].tokens) - 1] for i in live], device=model.device)
        mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
        logits = model(input_ids=ids, cache=cache, attention_mask=mask, position_ids=pos,
                       use_cache=True).logits[:, -1]
        keep = []
        for j, (i, token) in enumerate(zip(live, _pick(logits, [rows[i] for i in live], [gens[i] for i in live]))):
            r = rows[i]
            r.tokens.append(token)
            if r.tokens[-1] not in eos_ids and len(r.tokens) < r.decoding.max_new_tokens:
                keep.append(j)
        if len(keep) < len(live):
            if keep:
                idx = torch.tensor(keep, device=model.device)
                cache.batch_select_indices(idx)
                mask = mask[idx]
            live = [live[j] for j in keep]


@torch.no_grad()
def step(model, cache, token_ids: list[int], start: int) -> torch.Tensor:
    """Feed ``token_ids`` at positions ``start, start+1, ...``; returns the logits of the last one."""
    ids = torch.tensor([token_ids], device=model.device)
    pos = torch.arange(start, start + len(token_ids), device=model.device)[None]
    return model(input_ids=ids, cache=cache, position_ids=pos, use_cache=True, logits_to_keep=1).logits[0, -1].float().clone()


@torch.no_grad()
def decode_greedy(model, pre: Prefill, keep: torch.Tensor | None, max_new_tokens: int,
                  eos_ids: set[int]) -> tuple[list[int], str]:
    """One row, unbatched: greedy tokens from an evicted copy of the prefill cache (the reference path)."""
    row = Row(retention.evict(pre.cache, keep), pre.length, pre.last_logits, Decoding(0.0, 0, max_new_tokens))
    return decode(model, [row], eos_ids)[0]


@torch.no_grad()
def choose_after_cue(model, rows: list[Row], cue_ids: list[int], choice_ids: list[int]) -> list[int]:
    """Feed ``cue_ids`` to every row at once (each under its own evicted cache, at positions continuing
    from its own prompt length); per row, the index of the most likely choice token. The rows' caches
    are consumed."""
    cache, mask = _stack([r.cache for r in rows], model.device, room=len(cue_ids))
    for r in rows:
        r.cache = None
    ids = torch.tensor([cue_ids] * len(rows), device=model.device)
    pos = torch.tensor([[r.start + k for k in range(len(cue_ids))] for r in rows], device=model.device)
    mask = torch.cat([mask, mask.new_ones(len(rows), len(cue_ids))], dim=1)
    logits = model(input_ids=ids, cache=cache, attention_mask=mask, position_ids=pos, use_cache=True,
                   logits_to_keep=1).logits[:, -1]
    return logits[:, choice_ids].argmax(-1).tolist()


def eos_token_ids(model, tokenizer) -> set[int]:
    ids = model.generation_config.eos_token_id
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    return ids | {tokenizer.eos_token_id}


def row_key(model_name: str, prompt: pd.Series, policy: RetentionPolicy, decoding: dict, weights: str = "") -> str:
    """The shard key: what determines the generated tokens (model and its weights, prompt tokens, policy,
    decoding). ``weights``: ``models.weights_id`` of a loaded model ("" for a model built in memory)."""
    return shard_key(model=model_name, weights=weights, input_ids=list(map(int, prompt["input_ids"])),
                     policy=policy.name, policy_params=vars(policy), decoding=decoding)


def generation_id(key: str, prompt: pd.Series) -> str:
    """A plan row's id: its shard and its prompt (two prompts with the same tokens share a shard)."""
    return shard_key(row=key, study=prompt["study"], prompt_id=prompt["prompt_id"])


GENERATED = ["reply", "new_tokens", "finish", "kept_positions"]  # what a shard holds


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


def _decoding_key(d: Decoding) -> dict:
    if d.temperature == 0:
        return {"mode": "greedy", "max_new_tokens": d.max_new_tokens}
    return {"mode": "sample", "temperature": d.temperature, "seed": d.seed, "max_new_tokens": d.max_new_tokens}


SHORT_CACHE = 256  # positions: below this a decode step's cost is the weights, not the attention (frames, 3 models:
#                   64 made 30 smaller batches of less padding instead of 9, decode 121 -> 137 s)


def _length_class(cache_length: int) -> int:
    """Rows decode with rows of similar cache length (within a factor of sqrt 2): a row padded to a
    cache three times its own (a full-retention row beside evicted ones) costs three times the work.
    Caches shorter than ``SHORT_CACHE`` are one class: padding them costs less than a smaller batch."""
    return round(2 * math.log2(max(cache_length, SHORT_CACHE)))


AUTO_BATCH_FRACTION = 0.4  # of the free memory given to decode caches: rows of several cache-length classes
#                            wait at once, and activations, logits and the prefill's own cache need the rest
AUTO_BATCH_CAP = 256  # rows: past this a decode step is compute-bound and rows stop getting cheaper
CPU_BATCH_BYTES = 4 * 2**30  # on CPU, a decode batch's KV caches at most about this (rows' own lengths and
#                              new tokens; padding to the longest adds up to a length class's sqrt 2): 256 rows of
#                              short chat prompts, 74 of the kv study's 1,150-token prompts for the 135M model


def rows_that_fit(batch_rows: int, model, cache_positions: int) -> int:
    """How many rows of ``cache_positions`` positions one decode batch takes: ``batch_rows``, and on
    CPU (RAM, shared with everything else) at most ``CPU_BATCH_BYTES`` of KV cache; at least one."""
    if torch.device(model.device).type == "cuda":
        return batch_rows
    dtype_bytes = torch.finfo(model.dtype).bits // 8 if model.dtype.is_floating_point else 2
    per_row = kv_bytes_per_token(model.config, dtype_bytes) * max(cache_positions, 1)
    return max(1, min(batch_rows, CPU_BATCH_BYTES // per_row))


def kv_bytes_per_token(model_config, dtype_bytes: int) -> int:
    """KV-cache bytes of one token: 2 (keys and values) x layers x KV heads x head dim x dtype bytes."""
    cfg = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * dtype_bytes


def auto_batch_rows(model_config, context_tokens: int, free_bytes: int, dtype_bytes: int,
                    fraction: float = AUTO_BATCH_FRACTION, cap: int = AUTO_BATCH_CAP) -> int:
    """Decode rows that fit: ``fraction`` of ``free_bytes`` over one row's KV cache (``context_tokens``
    = prompt + new tokens), between 1 and ``cap``."""
    per_row = kv_bytes_per_token(model_config, dtype_bytes) * max(int(context_tokens), 1)
    return max(1, min(cap, int(free_bytes * fraction) // per_row))


def free_memory(device) -> int:
    """Free bytes where a model lives: the CUDA device's free memory, else available RAM."""
    if torch.device(device).type == "cuda":
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    return int(psutil.virtual_memory().available)


def resolve_batch_rows(batch_rows, model, context_tokens: int) -> int:
    """``generation.batch_rows`` for this model: the integer itself, or for ``auto`` the rows whose KV
    caches fit the memory free now (after the weights are loaded)."""
    if batch_rows == "auto":
        dtype_bytes = torch.finfo(model.dtype).bits // 8 if model.dtype.is_floating_point else 2
        return auto_batch_rows(model.config, context_tokens, free_memory(model.device), dtype_bytes)
    if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
        raise ValueError(f"batch_rows must be an integer >= 1 or 'auto', got {batch_rows!r}")
    return batch_rows


def run(model, tokenizer, model_name: str, prompts: pd.DataFrame,
        policies_of: Callable[[pd.Series], list[RetentionPolicy]], store: ShardStore,
        decodings: list[Decoding], answer_cue: tuple[list[int], list[str]] | None = None,
        batch_rows: int | str = 64, carry: tuple[str, ...] | list[str] = ()) -> pd.DataFrame:
    """Generate every (prompt, policy, decoding) row not already in ``store``; return all rows in plan order,
    with the core columns (``CORE_COLUMNS``) and each prompt's ``carry`` columns beside them.

    Prompts are prefilled in token order, alone (reusing a prefix shared with the previous prompt) or
    batched (``prefill_batches``); rows of similar cache length are decoded together ``batch_rows`` at a
    time (``auto``: from free memory; on CPU at most ``CPU_BATCH_BYTES`` of cache).
    With ``answer_cue=(cue_ids, choices)``, each row's reply is the choice (e.g. an MMLU letter)
    whose token is most likely after the cue, decoded under the same retention.
    """
    if answer_cue:
        decodings = [Decoding(0.0, 0, 1)]
    out_columns = columns(carry)
    missing = [c for c in carry if c not in prompts]
    if missing:
        raise ValueError(f"carry: the prompts table has no column(s) {missing}")
    keep_freed_memory()
    longest = int(prompts["prompt_tokens"].max()) if len(prompts) else 0
    batch_rows = resolve_batch_rows(batch_rows, model, longest + max(d.max_new_tokens for d in decodings))
    context = attention_span(model.config)
    check_plan(prompts, policies_of, context, max(d.max_new_tokens for d in decodings))
    cue_ids: list[int] = []
    if answer_cue:
        cue_ids = list(answer_cue[0])
        choice_ids = [tokenizer.encode(" " + c, add_special_tokens=False)[-1] for c in answer_cue[1]]
        mode = {"mode": "choice", "cue": answer_cue[0], "choices": answer_cue[1]}
    eos = eos_token_ids(model, tokenizer)
    weights = getattr(model, "weights_id", "")
    plan = [(p, pol, d, row_key(model_name, p, pol, mode if answer_cue else _decoding_key(d), weights))
            for _, p in prompts.iterrows() for pol in policies_of(p) for d in decodings]
    todo: dict[str, list] = {}  # prompt tokens -> jobs; a shard key is generated once however many rows share it
    seen: set[str] = set()
    for job in plan:
        if job[3] not in seen and not store.has(job[3]):
            seen.add(job[3])
            todo.setdefault(tuple(map(int, job[0]["input_ids"])), []).append(job)
    pending: dict[int, list[tuple]] = {}  # rows waiting to decode, by cache-length class
    started, new_tokens = time.perf_counter(), 0

    def record(key, keep_len, reply, new, finish):
        store.put(key, pd.DataFrame([{"reply": reply, "new_tokens": new, "finish": finish,
                                      "kept_positions": keep_len}], columns=GENERATED))
        bar.update()

    def flush(group: list[tuple]):
        nonlocal new_tokens
        kept = [row.cache.layers[0].keys.shape[2] for *_, row in group]
        if answer_cue:
            for (_, _, key, _), n_kept, choice in zip(group, kept, choose_after_cue(
                    model, [row for *_, row in group], answer_cue[0], choice_ids)):
                record(key, n_kept, answer_cue[1][choice], 1, "choice")
            group.clear()
            return
        results = decode(model, [row for *_, row in group], eos)
        for (_, _, key, _), n_kept, (tokens, finish) in zip(group, kept, results):
            record(key, n_kept, tokenizer.decode(tokens, skip_special_tokens=True), len(tokens), finish)
            new_tokens += len(tokens)
        bar.set_postfix(tok_s=f"{new_tokens / (time.perf_counter() - started):.1f}")
        group.clear()

    def queue(ids, pre):
        """Every row of one prefilled prompt, queued in its cache-length class (decoded, or answered after
        the cue, with the class's other rows)."""
        kept = {}
        for _, pol, d, key in todo[ids]:
            if id(pol) not in kept:
                kept[id(pol)] = pol.select(pre)
            keep = kept[id(pol)]
            row = Row(retention.evict(pre.cache, keep), pre.length, pre.last_logits, d,
                      sample_key=f"{key}|{d.temperature}")
            length = row.cache.layers[0].keys.shape[2]
            group = pending.setdefault(_length_class(length), [])
            group.append((pol, d, key, row))
            if len(group) >= rows_that_fit(batch_rows, model, length + max(d.max_new_tokens, len(cue_ids))):
                flush(group)

    if not plan:
        return pd.DataFrame(columns=out_columns)
    with progress.bar(sum(map(len, todo.values())), f"generate {model_name}", "row") as bar:
        # in token order, so that prompts sharing a prefix (same template, system text, filler) are neighbours
        windows = {ids: max((pol.window for _, pol, _, _ in jobs if pol.needs_window_attention), default=0)
                   for ids, jobs in todo.items()}
        order = sorted(todo)
        before = dict(zip(order[1:], order))  # the prompt a prefill may reuse: the previous in token order
        batches = prefill_batches(order, windows)
        wanted = {before[b[0]] for b in batches if len(b) == 1 and b[0] in before}
        saved: dict[tuple, Prefill] = {}  # prefills a later prompt may reuse, until it does
        for batch in batches:
            if len(batch) > 1:
                prefills = prefill_batch(model, [list(ids) for ids in batch])
            else:
                prefills = [prefill(model, list(batch[0]), capture_window=windows[batch[0]],
                                    reuse=saved.pop(before.get(batch[0]), None))]
            for ids, pre in zip(batch, prefills):
                if ids in wanted:
                    saved[ids] = pre
                queue(ids, pre)
        for group in pending.values():
            if group:
                flush(group)
    generated = store.collect([job[3] for job in plan])
    rows = pd.DataFrame([{
        "generation_id": generation_id(key, p), "prompt_id": p["prompt_id"], "item_id": p["item_id"],
        "model": model_name, "policy": pol.name, "keep_ratio": float(pol.keep_ratio), "sink": int(pol.sink),
        "temperature": d.temperature, "seed": d.seed, "prompt_tokens": int(p["prompt_tokens"]),
        **{c: p[c] for c in carry},
    } for p, pol, d, key in plan])
    return pd.concat([rows, generated], axis=1)[out_columns]
