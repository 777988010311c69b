"""What ``make check`` proves about each params model before any GPU time: its architecture runs
under the engine's eviction, and its tokenizer renders every prompt its studies will build.

For each model a study uses, when its config and tokenizer are on this machine (no weights are
loaded): the architecture is one the engine is proven on (``ENGINE_ARCHITECTURES``: each has a
stand-in in ``tests/test_families.py`` where full retention equals ``generate`` and every policy
equals its masked-attention reference); a base model (no chat template) only in a study that takes
one (``Study.base_models``); and the study's own rendering (``Study.renders``: each model with the check
its prompts need). Where they are absent, a note per model. Errors name the params file, the model and why.
A GGUF file's architecture is read from its metadata before the file is converted (a minute for a 0.5B model).
A study's control kept from another run (``kept_controls``: an organism built here on a model the study does not
study) stops the check too.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from . import chat, model_shape, models, studies
from .studies.contract import Rendering

ENGINE_ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral", "mistral3", "phi3", "olmo3", "olmo2", "gemma2", "granite")


def study_models(p) -> list[tuple[str, Rendering]]:
    """(study, rendering) for every model a study of ``p`` renders prompts for."""
    return [(name, r) for name in p.studies for r in studies.get(name).renders(p)]


def check_architecture(cfg) -> None:
    if cfg.model_type not in ENGINE_ARCHITECTURES:
        raise RuntimeError(f"architecture {cfg.model_type!r} ({', '.join(cfg.architectures or [])}) is not one the "
                           f"engine's eviction is proven on ({', '.join(ENGINE_ARCHITECTURES)}): add its stand-in to "
                           "tests/test_families.py first")


def check_rendering(p, study: str, tokenizer, rendering: Rendering) -> None:
    """Render what ``study`` will render with ``tokenizer``; raise with the reason if it cannot."""
    if not chat.has_template(tokenizer) and not studies.get(study).base_models:
        takers = [n for n in p.studies if studies.get(n).base_models]
        raise RuntimeError(f"a base model (its tokenizer has no chat template) in the {study} study, whose prompts "
                           "need a chat turn (base models are taken only by "
                           f"{', '.join(takers) or 'studies that declare base_models'})")
    rendering.check(tokenizer)


# GGUF metadata's general.architecture -> the transformers model type it loads as
GGUF_TYPES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3", "gemma2": "gemma2",
              "olmo2": "olmo2", "mistral": "mistral", "granite": "granite"}
# the study keys that name a control or a reference model: a model organism built for one model, not for another
CONTROL_KEYS = ("positive_control", "null_control", "base_of", "interaction_reference")


def check_gguf(p, name: str, spec) -> None:
    """A GGUF file's architecture from its metadata, before the conversion: one the engine is proven on."""
    if spec.source.startswith("pkg:"):  # the embedded model: proven by the test suite
        return
    where = models.resolve(spec.source)
    if not where.gguf_file:
        return
    arch = model_shape.gguf_architecture(Path(where.directory) / where.gguf_file)
    kind = GGUF_TYPES.get(arch)
    if kind not in ENGINE_ARCHITECTURES:
        raise RuntimeError(f"{p.source_file}: models.{name}.source: {spec.source}: GGUF architecture {arch!r} is not "
                           f"one the engine is proven on (GGUF {', '.join(GGUF_TYPES)}); use a model of a proven "
                           "family, or add the architecture's stand-in to tests/test_families.py first")


def _named(value) -> list[str]:
    if isinstance(value, dict):
        return [str(v) for kv in value.items() for v in kv]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)] if value else []


def kept_controls(p) -> None:
    """A study's control (``CONTROL_KEYS``) that is an organism built here (an adapter) on a source none of the
    study's other models has: kept from the default params for a model this run does not study, it controls the
    pipeline for that model, not for this run's. Raises naming the file, the key and what to change."""
    for study in p.studies:
        declared = dataclasses.asdict(p.studies[study])  # the section's declared keys, as written in params
        controls = {k: _named(declared.get(k)) for k in CONTROL_KEYS}
        named = {m for ms in controls.values() for m in ms}
        studied = {r.model for r in studies.get(study).renders(p)} - named
        sources = {p.models[m].source for m in studied if m in p.models}
        if not sources:  # a run of its controls alone (the default's pipeline check)
            continue
        for key, names in controls.items():
            for m in names:
                spec = p.models.get(m)
                if spec is not None and spec.adapter and spec.source not in sources:
                    raise ValueError(
                        f"{p.source_file}: {study}.{key}: {m} is an organism built on {spec.source} "
                        f"(models.{m}.adapter {spec.adapter}), a model this run's {study} study does not study "
                        f"({', '.join(sorted(studied))}: {', '.join(sorted(sources))}); it controls the pipeline for "
                        f"that model, not for yours: drop {study}.{key} (and {m} from {study}.models), see "
                        "docs/own_model.md")


def check_sources(p) -> None:
    """Before anything is loaded or converted: every local model source is a model (``models.not_a_model``), a GGUF
    file's architecture is proven (``check_gguf``), and no study keeps a control built for another model
    (``kept_controls``). Sources not on this machine are left to ``models.check_models``."""
    kept_controls(p)
    for name, spec in p.models.items():
        try:
            where = models.resolve(spec.source)
        except FileNotFoundError:
            continue
        models.not_a_model(p, name, spec, where)
        check_gguf(p, name, spec)


def check_params(p, pool: models.Pool) -> None:
    """Every study model of ``p``: architecture and rendering checked where its config and tokenizer
    are local, a note in ``pool.notes`` where they are not. Raises naming the file, model and reason."""
    tokenizers: dict[str, object] = {}  # by source: a GGUF tokenizer takes seconds to read
    for study, rendering in study_models(p):
        name = rendering.model
        spec = pool.spec(name)
        try:
            cfg = models.load_config(spec)
            tok = tokenizers[spec.source] = tokenizers.get(spec.source) or pool.tokenizer(name)
        except (OSError, ValueError) as e:  # FileNotFoundError is an OSError
            if not pool.missing_ok:
                raise FileNotFoundError(f"{p.source_file}: models.{name}: {e}") from None
            pool.notes = [n for n in pool.notes if not n.startswith(f"models.{name}: weights not on this machine")]
            pool.notes.append(f"models.{name}: config and tokenizer not on this machine: its weights, architecture "
                              "and chat template are checked where it runs")
            continue
        try:
            check_architecture(cfg)
            check_rendering(p, study, tok, rendering)
        except (RuntimeError, ValueError) as e:  # chat.RenderError and the frames WrapperError are ValueErrors
            raise RuntimeError(f"{p.source_file}: {study}: models.{name} ({spec.source}): {e}") from None
