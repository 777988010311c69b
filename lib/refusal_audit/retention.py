"""KV-cache retention policies: which prompt positions each layer and KV head keeps after prefill.

A policy is a small class with one method, ``select(prefill)``, returning the kept positions as a
LongTensor ``[layers, kv_heads, k]`` (sorted), or ``None`` to keep everything. Policies live in a
registry, so a new one (H2O, key-norm, a random matched control) is one class and one decorator.

Budget: ``budget(n)`` positions of an ``n``-token prompt are kept, ``round(keep_ratio * n)`` (at
least 1), or ``max_tokens`` when set; sink positions count inside the budget. ``sink_tail`` keeps
the first ``sink`` positions and the last ``budget - sink``; ``snapkv`` keeps the last ``window``
positions and, per layer and KV head, the ``budget - window`` earlier positions that the window's
queries attend to most (pooled over the window, smoothed by average pooling, averaged over the
query heads of the group), after Li et al. 2024 (SnapKV) and kvpress' SnapKVPress.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

REGISTRY: dict[str, type[RetentionPolicy]] = {}


def register(name: str):
    def deco(cls):
        cls.name = name
        REGISTRY[name] = cls
        return cls
    return deco


@dataclass
class Prefill:
    """What one prefill leaves: the cache, the prompt length and (if captured) window attention."""

    cache: object  # transformers DynamicCache
    length: int
    window_scores: list[torch.Tensor] | None = None  # per layer, [kv_heads, length]
    last_logits: torch.Tensor | None = None
    input_ids: list[int] | None = None  # the prompt (lets the next prefill reuse a shared prefix)


@dataclass
class RetentionPolicy:
    """Base class: keep_ratio in (0, 1] or max_tokens sets the budget; sink positions count inside it."""

    keep_ratio: float = 1.0
    sink: int = 0
    max_tokens: int | None = None
    name = "base"
    needs_window_attention = False

    def __post_init__(self):
        if self.max_tokens is None and not 0 < self.keep_ratio <= 1:
            raise ValueError(f"retention {self.name}: keep_ratio must be in (0, 1], got {self.keep_ratio}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"retention {self.name}: max_tokens must be >= 1, got {self.max_tokens}")
        if self.sink < 0:
            raise ValueError(f"retention {self.name}: sink must be >= 0, got {self.sink}")

    def budget(self, n: int) -> int:
        if self.max_tokens is not None:
            return min(n, self.max_tokens)
        return min(n, max(1, round(self.keep_ratio * n)))

    def check(self, n: int) -> None:
        """Raise if this policy cannot run on an ``n``-token prompt (called before any work)."""
        if self.sink > self.budget(n):
            raise ValueError(f"retention {self.name}: sink {self.sink} is larger than the budget "
                             f"{self.budget(n)} of a {n}-token prompt (keep_ratio {self.keep_ratio})")

    def select(self, prefill: Prefill) -> torch.Tensor | None:
        raise NotImplementedError


def _layout(prefill: Prefill) -> tuple[int, int]:
    first = prefill.cache.layers[0].keys
    return len(prefill.cache.layers), first.shape[1]


@register("full")
class Full(RetentionPolicy):
    """Keep every position (the reference)."""

    def select(self, prefill):
        return None


@register("sink_tail")
class SinkTail(RetentionPolicy):
    """The first ``sink`` positions (attention sinks) and the most recent ``budget - sink``."""

    def select(self, prefill):
        n = prefill.length
        b = self.budget(n)
        if b >= n:
            return None
        self.check(n)
        pos = torch.cat([torch.arange(self.sink), torch.arange(n - (b - self.sink), n)])
        layers, heads = _layout(prefill)
        return pos.expand(layers, heads, -1).clone()


@register("snapkv")
@dataclass
class SnapKV(RetentionPolicy):
    """The last ``window`` positions plus the earlier positions the window attends to most."""

    window: int = 32
    kernel: int = 7
    needs_window_attention = True

    def check(self, n: int) -> None:
        super().check(n)
        if self.window >= self.budget(n) and self.budget(n) < n:
            raise ValueError(f"retention snapkv: observation window {self.window} is not smaller than the budget "
                             f"{self.budget(n)} of a {n}-token prompt")

    def select(self, prefill):
        n = prefill.length
        b = self.budget(n)
        if b >= n:
            return None
        self.check(n)
        if prefill.window_scores is None:
            raise RuntimeError("snapkv needs the prefill's window attention (prefill with capture_window > 0)")
        w = min(self.window, n)
        keep = []
        for scores in prefill.window_scores:  # [kv_heads, n]
            s = scores[:, : n - w]
            if self.kernel > 1:
                s = F.avg_pool1d(s[:, None], self.kernel, stride=1, padding=self.kernel // 2,
                                 count_include_pad=False)[:, 0]
            top = s.topk(b - w, dim=-1).indices
            tail = torch.arange(n - w, n).expand(s.shape[0], -1)
            keep.append(torch.cat([top, tail], dim=-1).sort(dim=-1).values)
        return torch.stack(keep)


# --- policies around the system span (the kv study's span arms) ------------------------------------
@dataclass
class _SpanPolicy(RetentionPolicy):
    """A policy that needs the prompt's system span ``[span_start, span_end)`` (``prompts.system_span``)."""

    span_start: int = 0
    span_end: int = 0

    def check(self, n: int) -> None:
        if not 0 <= self.span_start < self.span_end <= n:
            raise ValueError(f"retention {self.name}: the prompt has no system span (span [{self.span_start}, "
                             f"{self.span_end}) of a {n}-token prompt); a span arm needs a system text in the prompt")

    def span(self) -> torch.Tensor:
        return torch.arange(self.span_start, self.span_end)


@register("sink_span")
@dataclass
class SinkSpan(_SpanPolicy):
    """``sink_tail`` that keeps the system span too: the first ``sink`` positions, every position of the span,
    and the most recent positions up to the budget (sink and span count inside it)."""

    def check(self, n: int) -> None:
        super().check(n)
        head = len(set(range(min(self.sink, n))) | set(range(self.span_start, self.span_end)))
        if head > self.budget(n):
            raise ValueError(f"retention sink_span: sink {self.sink} and the system span ({self.span_end - self.span_start}"
                             f" tokens) exceed the budget {self.budget(n)} of a {n}-token prompt")

    def select(self, prefill):
        n = prefill.length
        self.check(n)
        if self.budget(n) >= n:
            return None
        head = torch.unique(torch.cat([torch.arange(min(self.sink, n)), self.span()]))
        rest = torch.tensor([i for i in range(n - 1, -1, -1) if i not in set(head.tolist())][: self.budget(n) - len(head)],
                            dtype=torch.long)
        pos = torch.cat([head, rest]).sort().values
        layers, heads = _layout(prefill)
        return pos.expand(layers, heads, -1).clone()


@register("minus_span")
@dataclass
class MinusSpan(_SpanPolicy):
    """Every position but the system span's (no budget: the full cache with the span's entries removed)."""

    def select(self, prefill):
        n = prefill.length
        self.check(n)
        pos = torch.tensor([i for i in range(n) if not self.span_start <= i < self.span_end], dtype=torch.long)
        layers, heads = _layout(prefill)
        return pos.expand(layers, heads, -1).clone()


SPAN_POLICIES = ("sink_span", "minus_span")


def span_retained(keep: torch.Tensor | None, start: int, end: int) -> float:
    """The share of prompt positions ``[start, end)`` a selection keeps, averaged over layers and KV heads
    (1.0 when everything is kept)."""
    if keep is None or end <= start:
        return 1.0
    inside = (keep >= start) & (keep < end)
    return float(inside.sum(dim=-1).float().mean()) / (end - start)


def make(name: str, **kwargs) -> RetentionPolicy:
    """A policy from the registry by name, e.g. ``make("sink_tail", keep_ratio=0.3, sink=4)``."""
    if name not in REGISTRY:
        raise ValueError(f"unknown retention policy {name!r}; expected one of {sorted(REGISTRY)}")
    return REGISTRY[name](**kwargs)


def window_scores(query: torch.Tensor, key: torch.Tensor, window: int, scaling: float | None = None,
                  softcap: float | None = None) -> torch.Tensor:
    """Attention of the last ``window`` queries over all keys, summed over the window and averaged
    over the query heads that share a KV head: ``[batch, kv_heads, keys]``.

    ``query`` is ``[batch, heads, m, d]``, the LAST ``m`` positions of an ``n``-token prompt
    (``m = n`` for a plain prefill, ``m < n`` when a cached prefix was reused), and ``key`` is
    ``[batch, kv_heads, n, d]`` (post-rotary). ``scaling`` (default ``1 / sqrt(d)``) and ``softcap``
    are the model's own (Granite scales by its attention multiplier, Gemma 2 soft-caps).
    """
    b, h, m, d = query.shape
    kv, n = key.shape[1], key.shape[2]
    w = min(window, m)
    q = query[:, :, m - w:]
    k = key.repeat_interleave(h // kv, dim=1)
    logits = q @ k.transpose(-1, -2) / math.sqrt(d) if scaling is None else (q @ k.transpose(-1, -2)) * scaling
    if softcap is not None:
        logits = torch.tanh(logits / softcap) * softcap
    causal = torch.arange(n)[None, :] > torch.arange(n - w, n)[:, None]
    logits = logits.masked_fill(causal, float("-inf"))
    attn = logits.softmax(dim=-1).sum(dim=2)  # [b, h, n]
    return attn.view(b, kv, h // kv, n).mean(dim=2)


def cache_of(layers) -> object:
    """A transformers ``DynamicCache`` over these (keys, values) pairs as they are, without copying them
    (``DynamicCache.update`` concatenates onto an empty tensor: a copy of every position). A forward pass
    over it concatenates into new tensors, so the given ones are never written."""
    from transformers import DynamicCache  # lazy: transformers, off the policies' light path
    from transformers.cache_utils import DynamicLayer  # lazy: transformers

    out = DynamicCache()
    for k, v in layers:
        layer = DynamicLayer()
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
        out.layers.append(layer)
    return out


def evict(cache, keep: torch.Tensor | None):
    """A new cache holding only the kept positions (per layer and head); the input is untouched (with
    ``keep`` None the new cache shares its tensors, which nothing writes)."""
    if keep is None:
        return cache_of((layer.keys, layer.values) for layer in cache.layers)
    out = []
    for i, layer in enumerate(cache.layers):
        k, v = layer.keys, layer.values
        idx = keep[i].to(k.device)[None, :, :, None].expand(k.shape[0], -1, -1, k.shape[-1])
        out.append((k.gather(2, idx), v.gather(2, idx)))
    return cache_of(out)
