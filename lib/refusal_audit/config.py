"""Run parameters: one YAML file per run, validated against a typed schema before any work.

Every error names the file, the dotted key and what was expected, e.g.
``params/x.yaml: kv.keep_ratio: expected a number in (0, 1], got 1.5``.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class ParamsError(ValueError):
    """A params file that does not fit the schema."""


@dataclass
class ModelSpec:
    """A model: a Hugging Face id, a local directory or .gguf file, or ``pkg:<module>`` for a
    GGUF file shipped inside an installed Python package."""

    source: str
    dtype: str = "float32"
    quantization: str = "none"  # none | bnb-4bit | awq
    adapter: str | None = None  # a peft LoRA adapter directory (relative to the repository root)
    testbed: bool = False  # a model organism: every figure of a run on it says it is a testbed


@dataclass
class DataParams:
    harmful_source: str = "harmbench"  # harmbench | advbench
    n_harmful: int = 200
    n_official: int = 0  # official HarmBench test-split prompts for the robustness check
    mmlu_subjects: list[str] = field(default_factory=lambda: [
        "abstract_algebra", "college_mathematics", "elementary_mathematics",
        "high_school_mathematics", "high_school_statistics"])
    mmlu_per_subject: int = 20


@dataclass
class KvParams:
    model: str = "smollm2-135m"
    system_prompt: str = ""
    filler_tokens: int = 2048
    filler_ablation: list[int] = field(default_factory=lambda: [0, 512, 2048])
    keep_ratio: float = 0.3
    sink: int = 4
    sink_ablation: list[int] = field(default_factory=lambda: [4, 64, 128])
    snapkv_window: int = 32
    snapkv_kernel: int = 7
    system_prompt_ablation: bool = True
    max_new_tokens: int = 64
    mmlu_filler_tokens: int = 2048
    batch_rows: int = 32  # rows (prompt x policy) decoded together; memory grows with it


@dataclass
class KeywordJudgeParams:
    list_name: str = "gcg_evaluate_full"
    match: str = "anywhere"
    casefold: bool = False


@dataclass
class LlmJudgeParams:
    model: str = "smollm2-135m"
    max_reply_tokens: int = 512


@dataclass
class JudgeParams:
    keyword: KeywordJudgeParams = field(default_factory=KeywordJudgeParams)
    learned: bool = True  # the committed MiniLM heads: learned_refusal, learned_refusal_soft, learned_harmful
    llm: LlmJudgeParams | None = field(default_factory=LlmJudgeParams)


@dataclass
class StatsParams:
    alpha: float = 0.05
    n_bootstrap: int = 2000


@dataclass
class Params:
    run_name: str
    models: dict[str, ModelSpec]
    seed: int = 0
    publish_figures: bool = False  # also write figures into the repository's figures/
    data: DataParams = field(default_factory=DataParams)
    kv: KvParams = field(default_factory=KvParams)
    judges: JudgeParams = field(default_factory=JudgeParams)
    stats: StatsParams = field(default_factory=StatsParams)
    source_file: str = field(default="<dict>", metadata={"internal": True})


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _coerce(value, tp, key: str, where: str):
    """Check ``value`` against annotation ``tp``; returns the value (dataclasses built)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, key, where)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ParamsError(f"{where}: {key}: expected a mapping, got {value!r}")
        return _build(tp, value, where, prefix=f"{key}.")
    if origin is list:
        (inner,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ParamsError(f"{where}: {key}: expected a list of {_type_name(inner)}, got {value!r}")
        return [_coerce(v, inner, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if origin is dict:
        _, inner = typing.get_args(tp)
        if not isinstance(value, dict) or not value:
            raise ParamsError(f"{where}: {key}: expected a non-empty mapping, got {value!r}")
        return {str(k): _coerce(v, inner, f"{key}.{k}", where) for k, v in value.items()}
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float) and isinstance(value, bool) or not isinstance(value, tp):
        raise ParamsError(f"{where}: {key}: expected {_type_name(tp)}, got {value!r}")
    return value


def _build(cls, raw: dict, where: str, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ParamsError(f"{where}: {prefix}{unknown[0]}: unknown key; expected one of {sorted(fields)}")
    kwargs = {}
    for name, f in fields.items():
        if name in raw:
            kwargs[name] = _coerce(raw[name], hints[name], prefix + name, where)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ParamsError(f"{where}: {prefix}{name}: missing required key")
    return cls(**kwargs)


def _check(p: Params, where: str) -> None:
    """Cross-field constraints that types cannot say."""

    def need(ok: bool, key: str, expected: str, got) -> None:
        if not ok:
            raise ParamsError(f"{where}: {key}: expected {expected}, got {got!r}")

    need(bool(p.run_name) and "/" not in p.run_name, "run_name", "a non-empty name without '/'", p.run_name)
    for name, m in p.models.items():
        need(m.dtype in ("float32", "bfloat16", "float16"), f"models.{name}.dtype",
             "one of float32, bfloat16, float16", m.dtype)
        need(m.quantization in ("none", "bnb-4bit", "awq"), f"models.{name}.quantization",
             "one of none, bnb-4bit, awq", m.quantization)
    need(p.data.harmful_source in ("harmbench", "advbench"), "data.harmful_source", "harmbench or advbench",
         p.data.harmful_source)
    need(p.data.n_harmful >= 1, "data.n_harmful", "an integer >= 1", p.data.n_harmful)
    need(p.data.n_official >= 0, "data.n_official", "an integer >= 0", p.data.n_official)
    need(p.data.mmlu_per_subject >= 0, "data.mmlu_per_subject", "an integer >= 0", p.data.mmlu_per_subject)
    kv = p.kv
    need(kv.model in p.models, "kv.model", f"a model named under models ({sorted(p.models)})", kv.model)
    need(0 < kv.keep_ratio <= 1, "kv.keep_ratio", "a number in (0, 1]", kv.keep_ratio)
    need(kv.max_new_tokens >= 1, "kv.max_new_tokens", "an integer >= 1", kv.max_new_tokens)
    need(kv.batch_rows >= 1, "kv.batch_rows", "an integer >= 1", kv.batch_rows)
    for key in ("filler_tokens", "mmlu_filler_tokens"):
        need(getattr(kv, key) >= 0, f"kv.{key}", "an integer >= 0", getattr(kv, key))
    need(all(f >= 0 for f in kv.filler_ablation), "kv.filler_ablation", "integers >= 0", kv.filler_ablation)
    need(kv.sink >= 0 and all(s >= 0 for s in kv.sink_ablation), "kv.sink_ablation", "integers >= 0",
         kv.sink_ablation)
    need(kv.snapkv_window >= 1, "kv.snapkv_window", "an integer >= 1", kv.snapkv_window)
    need(kv.snapkv_kernel >= 1 and kv.snapkv_kernel % 2 == 1, "kv.snapkv_kernel", "an odd integer >= 1",
         kv.snapkv_kernel)
    need(p.judges.keyword.match in ("anywhere", "prefix"), "judges.keyword.match", "anywhere or prefix",
         p.judges.keyword.match)
    if p.judges.llm is not None:
        need(p.judges.llm.model in p.models, "judges.llm.model",
             f"a model named under models ({sorted(p.models)})", p.judges.llm.model)
    need(0 < p.stats.alpha < 1, "stats.alpha", "a number in (0, 1)", p.stats.alpha)
    need(p.stats.n_bootstrap >= 100, "stats.n_bootstrap", "an integer >= 100", p.stats.n_bootstrap)


def from_dict(raw: dict, where: str = "<dict>") -> Params:
    """Validate a params mapping; raises ParamsError naming ``where`` and the key."""
    if not isinstance(raw, dict):
        raise ParamsError(f"{where}: expected a mapping at the top level, got {type(raw).__name__}")
    p = _build(Params, raw, where)
    _check(p, where)
    p.source_file = where
    return p


def load(path: str | Path) -> Params:
    """Read and validate one params YAML file."""
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path}: params file not found")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML: {e}") from None
    return from_dict(raw, str(path))


def to_dict(p: Params) -> dict:
    """The resolved params, as written to the run manifest."""
    return dataclasses.asdict(p)
