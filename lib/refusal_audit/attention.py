"""A hook into every attention layer, through transformers' AttentionInterface.

The registered function ``refusal_audit`` (``models.load`` installs it) runs transformers' SDPA
attention, except that on CPU a masked multi-token step lets SDPA group the query heads itself
(``grouped_query_sdpa``: bitwise the same, without copying the KV heads); while a hook is active
(``with attention_hook(model, fn)``), ``fn(layer_idx, query, key, attention_mask)`` sees the
post-rotary queries and keys of each layer first and may return a replacement mask. SnapKV uses
it to read the observation window's attention; the eviction tests use it to mask evicted
positions per layer and head. Hand-written because transformers has no per-layer query hook and
kvpress (which has one) does not support transformers 5.

While ``with shared_prefix_attention(model, prefixes)`` is active, a one-token step attends a layer's keys and
values after ``prefixes[layer_idx]``, positions every row of the batch shares (the kv study's
template, system text and filler), kept once for the batch (``attend_after_prefix``).
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "refusal_audit"
_hooks: list[Callable] = []
_prefixes: dict[int, tuple] = {}


def _forward(module, query, key, value, attention_mask, **kwargs):
    for hook in _hooks:
        new_mask = hook(module.layer_idx, query, key, attention_mask)
        if new_mask is not None:
            attention_mask = new_mask
    scaling = kwargs.get("scaling") or module.scaling
    prefix = _prefixes.get(module.layer_idx)
    if prefix is not None:
        return attend_after_prefix(query, *prefix, key, value, attention_mask, scaling, kwargs.get("softcap"))
    if kwargs.get("softcap") is not None:  # SDPA has no logit soft-capping (Gemma 2): the family's own eager path
        return _eager_softcapped(module, query, key, value, attention_mask, **kwargs)
    if _grouped_on_cpu(module, query, attention_mask, kwargs):
        return grouped_query_sdpa(query, key, value, attention_mask, scaling)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _grouped_on_cpu(module, query, attention_mask, kwargs) -> bool:
    """A masked multi-token step of a grouped-query model on CPU, with nothing else SDPA must add
    (no dropout, no position bias): ``grouped_query_sdpa``'s case."""
    return (query.device.type == "cpu" and query.shape[2] > 1 and attention_mask is not None
            and getattr(module, "num_key_value_groups", 1) > 1 and not kwargs.get("dropout")
            and kwargs.get("position_bias") is None)


def grouped_query_sdpa(query, key, value, attention_mask, scaling: float):
    """SDPA with each KV head serving its group of query heads inside the kernel (``enable_gqa``),
    as transformers' function returns it ([batch, positions, heads, head dim]). transformers copies
    the KV heads out to every query head (``repeat_kv``) whenever a mask is given, for CUDA's sake;
    on CPU the kernel's own grouping gives the same output bitwise (tests/test_generation.py), its
    attention 1.6-2.6x faster (a 32-token window on a 2k-token cache: 2.4 -> 1.2 ms a layer)."""
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def attend_after_prefix(query, prefix_keys, prefix_values, key, value, attention_mask, scaling: float,
                        softcap: float | None = None):
    """Attention of one new token per row over a prefix every row shares (``prefix_keys``,
    ``prefix_values``: [1, kv heads, P, head dim]) and then its own positions (``key``, ``value``:
    [batch, kv heads, S, head dim], masked by ``attention_mask``: bool [batch, 1, 1, S], True =
    attend). The prefix is read once for the batch, as one matmul of every row's queries (Hydragen,
    Juravsky et al. 2024, arXiv:2402.05099); the two parts share one softmax (a common max, summed
    weights), in float32 at least whatever the model's dtype (as SDPA accumulates). Returns [batch,
    1, heads, head dim] in the query's dtype, as transformers' attention functions do. Hand-written:
    SDPA attends a [batch, ...] key tensor, so each row would read its own copy of the prefix (54 % of
    a decode step at 2k positions, benchmarks/decode_step.py)."""
    batch, heads, q_len, dim = query.shape
    if q_len != 1:
        raise RuntimeError(f"a shared prefix serves one-token decode steps, got {q_len} query positions")
    dtype, kv_heads = query.dtype, key.shape[1]
    group = heads // kv_heads
    work = torch.promote_types(dtype, torch.float32)
    query, prefix_keys, prefix_values, key, value = (x.to(work) for x in
                                                     (query, prefix_keys, prefix_values, key, value))
    q = query.reshape(batch, kv_heads, group, dim) * scaling  # the query heads of each KV head, scaled
    first = torch.matmul(q.transpose(0, 1).reshape(kv_heads, batch * group, dim), prefix_keys[0].transpose(1, 2))
    own = torch.matmul(q, key.transpose(2, 3))
    if softcap is not None:
        first, own = softcap * torch.tanh(first / softcap), softcap * torch.tanh(own / softcap)
    if attention_mask is not None:
        own = (own.masked_fill(~attention_mask, float("-inf")) if attention_mask.dtype == torch.bool
               else own + attention_mask)
    first = first.view(kv_heads, batch, group, -1).transpose(0, 1)  # [batch, kv heads, group, P]
    top = torch.maximum(first.amax(-1), own.amax(-1))[..., None]
    first, own = first.sub_(top).exp_(), own.sub_(top).exp_()  # in place: the prefix's scores are the big ones
    pv = torch.matmul(first.transpose(0, 1).reshape(kv_heads, batch * group, -1), prefix_values[0])
    out = pv.view(kv_heads, batch, group, dim).transpose(0, 1) + torch.matmul(own, value)
    out = out / (first.sum(-1) + own.sum(-1))[..., None]
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).to(dtype).contiguous(), None


def _eager_softcapped(module, query, key, value, attention_mask, **kwargs):
    """The model family's own eager attention (which soft-caps the logits), given the boolean mask
    that ``sdpa_mask`` builds (or a hook returns) as the additive mask eager attention expects; no
    mask (SDPA's implicit causal case) becomes the causal mask aligned to the last key."""
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise RuntimeError(f"{type(module).__name__}: soft-capped attention without an eager_attention_forward "
                           "in its modeling module; the engine cannot run this family")
    q, k = query.shape[2], key.shape[2]
    if attention_mask is None:
        attention_mask = torch.ones(q, k, dtype=torch.bool, device=query.device).tril(k - q)[None, None]
    if attention_mask.dtype == torch.bool:
        attention_mask = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device).masked_fill(
            ~attention_mask, torch.finfo(query.dtype).min)
    return eager(module, query, key, value, attention_mask[..., :k], **kwargs)


def layer_scales(model) -> dict[int, tuple[float, float | None]]:
    """Per layer: the attention's logit scale and soft-cap (None without one), as the model applies them."""
    return {m.layer_idx: (float(m.scaling), getattr(m, "attn_logit_softcapping", None))
            for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "scaling")}


AttentionInterface.register(NAME, _forward)
# Without a mask function of the same name, transformers builds no mask at all for a custom
# attention: padding would be attended and multi-token steps on a cache misaligned.
AttentionMaskInterface.register(NAME, sdpa_mask)


def install(model) -> None:
    """Route the model's attention through the hookable function (same numerics as ``sdpa``)."""
    if model.config._attn_implementation != NAME:
        model.set_attn_implementation(NAME)


@contextmanager
def shared_prefix_attention(model, prefixes: dict[int, tuple]):
    """While active, each layer ``i`` in ``prefixes`` attends ``prefixes[i]`` (keys, values: [1, kv
    heads, P, head dim]) before the cache's own positions: one-token decode steps only."""
    install(model)
    if _prefixes:
        raise RuntimeError("shared_prefix_attention: another shared prefix is active")
    _prefixes.update(prefixes)
    try:
        yield
    finally:
        _prefixes.clear()


@contextmanager
def attention_hook(model, fn: Callable):
    """Call ``fn(layer_idx, query, key, attention_mask)`` in every attention layer while active."""
    install(model)
    _hooks.append(fn)
    try:
        yield
    finally:
        _hooks.remove(fn)
