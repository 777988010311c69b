"""A hook into every attention layer, through transformers' AttentionInterface.

The registered function ``refusal_audit`` runs the usual SDPA attention; while a hook is active
(``with attention_hook(model, fn)``), ``fn(layer_idx, query, key, attention_mask)`` sees the
post-rotary queries and keys of each layer first and may return a replacement mask. SnapKV uses
it to read the observation window's attention; the eviction tests use it to mask evicted
positions per layer and head. Hand-written because transformers has no per-layer query hook and
kvpress (which has one) does not support transformers 5.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "refusal_audit"
_hooks: list[Callable] = []


def _forward(module, query, key, value, attention_mask, **kwargs):
    for hook in _hooks:
        new_mask = hook(module.layer_idx, query, key, attention_mask)
        if new_mask is not None:
            attention_mask = new_mask
    if kwargs.get("softcap") is not None:  # SDPA has no logit soft-capping (Gemma 2): the family's own eager path
        return _eager_softcapped(module, query, key, value, attention_mask, **kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _eager_softcapped(module, query, key, value, attention_mask, **kwargs):
    """The model family's own eager attention (which soft-caps the logits), given the boolean mask
    that ``sdpa_mask`` builds (or a hook returns) as the additive mask eager attention expects; no
    mask (SDPA's implicit causal case) becomes the causal mask aligned to the last key."""
    import sys

    import torch

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
def attention_hook(model, fn: Callable):
    """Call ``fn(layer_idx, query, key, attention_mask)`` in every attention layer while active."""
    install(model)
    _hooks.append(fn)
    try:
        yield
    finally:
        _hooks.remove(fn)
