"""A model's shape read from the model itself, with no weights loaded: its GGUF metadata (``gguf.GGUFReader``:
``<arch>.block_count``, ``.attention.head_count``, ``.attention.head_count_kv``, ``.embedding_length``, the
tokenizer's tokens, the tensors' element counts) or its ``config.json`` (a local folder, a GGUF file's converted
folder, or a hub id in the local cache) with the safetensors headers' tensor shapes for the parameter count.

``make plan`` sizes a model from here (``plan.size``), so a user's own model is planned at its own layers, KV width,
vocabulary and size, not at a guess from its name; ``None`` where the model is not on this machine.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import try_to_load_from_cache


@dataclass(frozen=True)
class Shape:
    params_b: float   # parameters, in billions
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    hidden: int
    architecture: str
    source: str       # where it was read: "GGUF metadata" | "config.json"

    @property
    def kv_width(self) -> int:
        """KV heads x head dim: one layer's keys (or values) per token."""
        return self.kv_heads * self.head_dim


def _field(reader, key: str):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of a GGUF file (its metadata only)."""
    import gguf  # lazy: only for a GGUF file

    return str(_field(gguf.GGUFReader(str(path)), "general.architecture"))


def from_gguf(path: Path) -> Shape:
    """The shape in a GGUF file's metadata; the parameter count is the sum of its tensors' elements."""
    import gguf  # lazy: only for a GGUF file

    r = gguf.GGUFReader(str(path))
    arch = _field(r, "general.architecture")
    hidden, heads = int(_field(r, f"{arch}.embedding_length")), int(_field(r, f"{arch}.attention.head_count"))
    kv = _field(r, f"{arch}.attention.head_count_kv")
    head_dim = _field(r, f"{arch}.attention.key_length") or hidden // heads
    tokens = r.fields.get("tokenizer.ggml.tokens")
    vocab = _field(r, f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else 0)
    return Shape(sum(int(t.n_elements) for t in r.tensors) / 1e9, int(_field(r, f"{arch}.block_count")), heads,
                 int(kv if kv is not None else heads), int(head_dim), int(vocab), hidden, str(arch), "GGUF metadata")


def _safetensors_params(folder: Path) -> int:
    """Elements of every tensor in the folder's safetensors files, from their headers alone."""
    total = 0
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as h:
            header = json.loads(h.read(struct.unpack("<Q", h.read(8))[0]))
        total += sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")
    return total


def from_config(folder: Path) -> Shape:
    """The shape in a folder's ``config.json`` (its text config for a multimodal model); the parameter count from
    the safetensors headers, else from the config (embeddings + 12 hidden^2 per layer)."""
    c = json.loads((folder / "config.json").read_text())
    c = c.get("text_config", c)
    hidden, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    heads = int(c["num_attention_heads"])
    kv = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    vocab = int(c.get("vocab_size", 0))
    n = _safetensors_params(folder) or vocab * hidden + 12 * layers * hidden ** 2
    arch = (c.get("architectures") or [c.get("model_type", "unknown")])[0]
    return Shape(n / 1e9, layers, heads, kv, head_dim, vocab, hidden, str(arch), "config.json")


def read(source: str) -> Shape | None:
    """The shape of a model source (``pkg:``, a ``.gguf`` file, a folder, a hub id in the local cache); ``None``
    when nothing of it is on this machine."""
    from . import models  # lazy: torch

    try:
        where = models.resolve(source)
    except FileNotFoundError:
        return None
    if where.gguf_file:
        return from_gguf(Path(where.directory) / where.gguf_file)
    folder = Path(where.directory)
    if not (folder / "config.json").is_file():
        found = try_to_load_from_cache(source, "config.json")
        if not isinstance(found, str):
            return None
        folder = Path(found).parent
    return from_config(folder)
