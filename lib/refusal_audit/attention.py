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
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


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
