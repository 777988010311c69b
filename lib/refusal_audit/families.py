"""What ``make check`` proves about each params model before any GPU time: its architecture runs
under the engine's eviction, and its tokenizer renders every prompt its studies will build.

For each model a study uses, when its config and tokenizer are on this machine (no weights are
loaded): the architecture is one the engine is proven on (``ENGINE_ARCHITECTURES``: each has a
stand-in in ``tests/test_families.py`` where full retention equals ``generate`` and every policy
equals its masked-attention reference); a base model (no chat template) only in a study that takes
one (``Study.base_models``); and the study's own rendering (``Study.renders``: each model with the check
its prompts need). Where they are absent, a note per model. Errors name the params file, the model and why.
"""
from __future__ import annotations

from . import chat, models, studies
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
