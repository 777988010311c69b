"""Padded batches of token lists: several prompts of different lengths in one forward pass (the
engine's batched prefill, the confusion study's token signals, the frames study's familiarity).
Padding is masked and each row's positions start at 0 at its first real token, so a row's outputs
equal its own unpadded forward pass up to float rounding."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PADDING_SIDES = ("left", "right")


def pad_batch(token_ids: Sequence[Sequence[int]], pad_id: int, side: str = "left") -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask), both int64 of shape (batch, longest), padded on ``side``."""
    if side not in PADDING_SIDES:
        raise ValueError(f"padding_side must be one of {PADDING_SIDES}, got {side!r}")
    if any(len(ids) == 0 for ids in token_ids):
        raise ValueError("a prompt has no tokens")
    width = max(len(ids) for ids in token_ids)
    ids = np.full((len(token_ids), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(token_ids), width), dtype=np.int64)
    for b, row in enumerate(token_ids):
        cols = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[b, cols] = row
        mask[b, cols] = 1
    return ids, mask


def positions(mask: np.ndarray) -> np.ndarray:
    """Each row's own positions under its attention mask, 0 at its first real token (a padded position's
    value does not matter: it is masked)."""
    return np.clip(np.asarray(mask).cumsum(-1) - 1, 0, None)
