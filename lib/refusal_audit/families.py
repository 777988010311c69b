"""What ``make check`` proves about each params model before any GPU time: its architecture runs
under the engine's eviction, and its tokenizer renders every prompt its studies will build.

For each model a study uses, when its config and tokenizer are on this machine (no weights are
loaded): the architecture is one the engine is proven on (``ENGINE_ARCHITECTURES``: each has a
stand-in in ``tests/test_families.py`` where full retention equals ``generate`` and every policy
equals its masked-attention reference); a base model (no chat template) only in a study that takes
one (``chat.BASE_MODEL_STUDIES``); and the study's rendering: kv's exact filler (with and without its
system text), frames' frame locality, confusion's and policy's user turn (with the guard's template
arguments). Where they are absent, a note per model. Errors name the params file, the model and why.
"""
from __future__ import annotations

from . import chat, models, prompts

ENGINE_ARCHITECTURES = ("llama", "qwen2", "qwen3", "mistral", "mistral3", "phi3", "olmo3", "olmo2", "gemma2", "granite")
PROBE_QUERY = "Explain how a town library organises its catalogue."


def study_models(p) -> list[tuple[str, str, dict]]:
    """(study, model name, rendering settings) for every model a study of ``p`` renders prompts for."""
    out = []
    for study, s in p.studies.items():
        if study == "kv":  # one model (kv.model) or several (kv.models)
            from .studies.kv import model_names

            out += [(study, m, {"system": s.system_prompt or None}) for m in model_names(s)]
        elif study == "frames":
            ref = s.reference_model or s.models[0]
            for m in list(dict.fromkeys(s.models + [ref])):
                out.append((study, m, {"wrapper": s.wrapper, "frames": s.frames}))
        elif study == "confusion":
            out += [(study, m, {"system": s.system_prompt or None}) for m in s.models]
        elif study == "policy":
            out += [(study, g.model, {"system": g.system, "risk_name": g.risk_name}) for g in s.guards]
    return out


def check_architecture(cfg) -> None:
    if cfg.model_type not in ENGINE_ARCHITECTURES:
        raise RuntimeError(f"architecture {cfg.model_type!r} ({', '.join(cfg.architectures or [])}) is not one the "
                           f"engine's eviction is proven on ({', '.join(ENGINE_ARCHITECTURES)}): add its stand-in to "
                           "tests/test_families.py first")


def check_rendering(study: str, tokenizer, settings: dict) -> None:
    """Render what ``study`` will render with ``tokenizer``; raise with the reason if it cannot."""
    from .studies.frames import wrapper as W

    if not chat.has_template(tokenizer) and study not in chat.BASE_MODEL_STUDIES:
        raise RuntimeError(f"a base model (its tokenizer has no chat template) in the {study} study, whose prompts "
                           f"need a chat turn (base models are taken only by {', '.join(chat.BASE_MODEL_STUDIES)})")
    if study == "kv":
        for system in dict.fromkeys([settings["system"], None]):
            n = 32
            ids = prompts.render_ids(tokenizer, system, PROBE_QUERY, n)
            filler = prompts.filler_ids(tokenizer, n)
            if not any(ids[i:i + n] == filler for i in range(len(ids) - n + 1)):
                raise RuntimeError("the kv filler is not spliced exactly into the rendered prompt")
    elif study == "frames":
        W.check_locality(tokenizer, settings["wrapper"], settings["frames"], PROBE_QUERY, "probe body")
    elif study == "confusion":
        chat.render(tokenizer, chat.turn(settings["system"], PROBE_QUERY))
    elif study == "policy":
        kwargs = {"guardian_config": {"risk_name": settings["risk_name"]}} if settings["risk_name"] else {}
        text = chat.render(tokenizer, chat.turn(settings["system"], PROBE_QUERY), **kwargs)
        if PROBE_QUERY not in text:
            raise RuntimeError("the guard's template does not render the user's prompt")


def check_params(p, pool: models.Pool) -> None:
    """Every study model of ``p``: architecture and rendering checked where its config and tokenizer
    are local, a note in ``pool.notes`` where they are not. Raises naming the file, model and reason."""
    tokenizers: dict[str, object] = {}  # by source: a GGUF tokenizer takes seconds to read
    for study, name, settings in study_models(p):
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
            check_rendering(study, tok, settings)
        except (RuntimeError, ValueError) as e:  # chat.RenderError and the frames WrapperError are ValueErrors
            raise RuntimeError(f"{p.source_file}: {study}: models.{name} ({spec.source}): {e}") from None
