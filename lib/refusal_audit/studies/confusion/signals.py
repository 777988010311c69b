"""Token-level signals from a causal LM, for the confusion (ParaGuard) metrics.

One forward pass over a batch of prompts (already rendered to token ids) gives, per prompt:

- ``hidden``: the hidden states of one layer for every prompt token, shape (n_tokens, d).
  ``layer`` indexes the model's ``hidden_states`` tuple (0 = embeddings, -1 = last layer; for
  Llama-family models the last entry is taken after the final norm). Default: the last layer.
- ``next_token_logprobs``: log-softmax of the logits at the last prompt position, shape (vocab,):
  the distribution of the reply's first token, where accept/reject is decided.
- ``token_logprobs``: log p(t_i | t_<i) for the prompt's own tokens i = 1..n-1, shape (n-1,)
  (the first token has no context); their negative mean is the log-perplexity.

Padding: prompts are padded on either side with an attention mask; position ids are derived from
the mask (``cumsum(mask) - 1``), so left padding does not shift positions and results match a
one-at-a-time pass up to float rounding. The tokens every prompt of a batch opens with (the chat
template's header: about half of a short prompt) are computed once and the rest attends to them.
Results are cached per key (model name, layer, token ids) in memory and, with a directory, on disk as
one ``.npz`` per key written by atomic rename, so no prompt is recomputed per pair. ``model_name`` must identify the
weights and dtype (a params model
name does); the cache never looks inside the model.

Metrics (``metrics.py``) read these arrays duck-typed and never import torch.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...padding import PADDING_SIDES, pad_batch, positions  # noqa: F401 (PADDING_SIDES: the public name)


@dataclass(frozen=True)
class PromptSignals:
    """The signals of one prompt (float32 numpy arrays; see the module docstring)."""

    input_ids: np.ndarray  # (n,) int64
    hidden: np.ndarray  # (n, d)
    next_token_logprobs: np.ndarray  # (vocab,)
    token_logprobs: np.ndarray  # (n - 1,)
    layer: int

    @property
    def next_token_probs(self) -> np.ndarray:
        """The next-token distribution as probabilities."""
        return np.exp(self.next_token_logprobs.astype(np.float64))

    @property
    def log_perplexity(self) -> float:
        """Mean negative log-likelihood of tokens 1..n-1 (natural log)."""
        return float(-np.mean(self.token_logprobs))

    def select(self, start: int, stop: int) -> PromptSignals:
        """The same signals restricted to tokens [start, stop) (for example the user turn, leaving
        out the chat template around it). ``token_logprobs`` keeps the tokens of the span that have
        a context (token 0 has none); the next-token distribution is unchanged."""
        n = len(self.input_ids)
        if not 0 <= start < stop <= n:
            raise ValueError(f"span [{start}, {stop}) is not inside the prompt's {n} tokens")
        return PromptSignals(input_ids=self.input_ids[start:stop], hidden=self.hidden[start:stop],
                             next_token_logprobs=self.next_token_logprobs,
                             token_logprobs=self.token_logprobs[max(start, 1) - 1:stop - 1], layer=self.layer)


def cache_key(model_name: str, layer: int, token_ids: Sequence[int]) -> str:
    """sha256 of (model name, layer, token ids): the cache's file name."""
    payload = json.dumps([model_name, int(layer), [int(t) for t in token_ids]])
    return hashlib.sha256(payload.encode()).hexdigest()


class SignalCache:
    """key -> PromptSignals, in memory and (with ``directory``) one ``<key>.npz`` per key on disk."""

    def __init__(self, directory: str | Path | None = None):
        self.memory: dict[str, PromptSignals] = {}
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)

    def __len__(self) -> int:
        return len(self.memory)

    def get(self, key: str) -> PromptSignals | None:
        if key in self.memory:
            return self.memory[key]
        if self.directory is None or not (self.directory / f"{key}.npz").exists():
            return None
        with np.load(self.directory / f"{key}.npz") as f:
            sig = PromptSignals(input_ids=f["input_ids"], hidden=f["hidden"], next_token_logprobs=f["next_token_logprobs"],
                                token_logprobs=f["token_logprobs"], layer=int(f["layer"]))
        self.memory[key] = sig
        return sig

    def put(self, key: str, sig: PromptSignals) -> None:
        self.memory[key] = sig
        if self.directory is None:
            return
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, input_ids=sig.input_ids, hidden=sig.hidden, next_token_logprobs=sig.next_token_logprobs,
                         token_logprobs=sig.token_logprobs, layer=np.int64(sig.layer))
            os.replace(tmp, self.directory / f"{key}.npz")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def forward_padded(model, input_ids, attention_mask, layer: int = -1, head: PromptSignals | None = None,
                   past=None) -> list[PromptSignals]:
    """The signals of every row of one padded batch (either padding side), in one forward pass. With
    ``head`` (the signals of the tokens every row opens with, computed once) and ``past`` (its KV cache,
    one copy per row), the batch holds only what follows the head, and each row's signals are the
    head's joined with its own: equal to a pass over the whole prompt up to float rounding."""
    import torch  # lazy: keeps torch off this module

    device = next(model.parameters()).device
    n_head = 0 if head is None else len(head.input_ids)
    ids = torch.as_tensor(np.asarray(input_ids), dtype=torch.long, device=device)
    suffix_mask = np.asarray(attention_mask)
    full_mask = np.concatenate([np.ones((len(suffix_mask), n_head), dtype=suffix_mask.dtype), suffix_mask], axis=1)
    mask = torch.as_tensor(suffix_mask, dtype=torch.long, device=device)
    pos = torch.as_tensor(n_head + positions(suffix_mask), dtype=torch.long, device=device)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=torch.as_tensor(full_mask, device=device), position_ids=pos,
                    cache=past, use_cache=past is not None, output_hidden_states=True)
    states = getattr(out, "hidden_states", None)
    if not states:
        raise ValueError(f"model {type(model).__name__} returned no hidden states with output_hidden_states=True; "
                         "the confusion signals need a causal LM that exposes them")
    if not -len(states) <= layer < len(states):
        raise ValueError(f"layer {layer} is out of range: the model returns {len(states)} hidden-state entries "
                         f"(0 = embeddings, {len(states) - 1} = last layer)")
    hidden, logits = states[layer], out.logits
    result = []
    for b in range(ids.shape[0]):
        keep = mask[b].nonzero().squeeze(-1)
        row_ids = ids[b, keep]
        logp = torch.log_softmax(logits[b, keep].float(), dim=-1)  # (n, vocab), one prompt at a time
        own = logp[:-1].gather(-1, row_ids[1:, None]).squeeze(-1).cpu().numpy()
        row_hidden = hidden[b, keep].float().cpu().numpy()
        row_ids = row_ids.cpu().numpy()
        if head is not None:  # the head's signals, then log p(first own token | head), then the row's own
            first = head.next_token_logprobs[row_ids[:1]]
            own = np.concatenate([head.token_logprobs, first, own])
            row_hidden = np.concatenate([head.hidden, row_hidden])
            row_ids = np.concatenate([head.input_ids, row_ids])
        result.append(PromptSignals(input_ids=row_ids, hidden=row_hidden,
                                    next_token_logprobs=logp[-1].cpu().numpy().copy(),  # not a view of all positions
                                    token_logprobs=own, layer=layer))
    return result


def _head(model, rows: list[Sequence[int]], layer: int):
    """(signals, KV cache repeated per row) of the tokens every row opens with (the chat template's
    header; ``generation.head_length``), or (None, None) when they are too few."""
    import torch  # lazy: keeps torch off this module

    from ...generation import head_length, repeated  # lazy: keeps torch, transformers off this module

    n = head_length([list(r) for r in rows])
    if not n:
        return None, None
    device = next(model.parameters()).device
    ids = torch.as_tensor(list(rows[0][:n]), device=device)
    with torch.inference_mode():
        out = model(input_ids=ids[None], use_cache=True, output_hidden_states=True)
    states = getattr(out, "hidden_states", None)
    if not states or not -len(states) <= layer < len(states):
        return None, None  # forward_padded names the problem
    logp = torch.log_softmax(out.logits[0].float(), dim=-1)
    head = PromptSignals(input_ids=ids.cpu().numpy(), hidden=out.hidden_states[layer][0].float().cpu().numpy(),
                         next_token_logprobs=logp[-1].cpu().numpy().copy(),
                         token_logprobs=logp[:-1].gather(-1, ids[1:, None]).squeeze(-1).cpu().numpy(), layer=layer)
    return head, repeated(out.cache, len(rows))


def compute_signals(model, token_ids: Sequence[Sequence[int]], *, model_name: str, layer: int = -1,
                    pad_id: int = 0, padding_side: str = "left", batch_size: int = 8,
                    cache: SignalCache | None = None) -> list[PromptSignals]:
    """Signals for each prompt (in order), computing only the ones the cache lacks, ``batch_size``
    prompts per forward pass. ``pad_id`` only fills masked positions, so any id works."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    cache = cache if cache is not None else SignalCache()
    keys = [cache_key(model_name, layer, ids) for ids in token_ids]
    missing: dict[str, Sequence[int]] = {}
    for key, ids in zip(keys, token_ids):
        if key not in missing and cache.get(key) is None:
            missing[key] = ids
    todo = sorted(missing.items(), key=lambda kv: len(kv[1]))  # similar lengths share a batch: less padding
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        head, past = _head(model, [row for _, row in chunk], layer) if len(chunk) > 1 else (None, None)
        n_head = 0 if head is None else len(head.input_ids)
        ids, mask = pad_batch([row[n_head:] for _, row in chunk], pad_id, padding_side)
        for (key, _), sig in zip(chunk, forward_padded(model, ids, mask, layer, head, past)):
            cache.put(key, sig)
    return [cache.get(key) for key in keys]
