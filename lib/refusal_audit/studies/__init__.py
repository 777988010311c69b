"""The studies, behind one registry: a name in a params file -> the module that runs it.

Each study is a module (or small package) under ``studies/`` that implements one function per stage
(see ``Study`` below); it is imported only when a params file has its section. Code that two
studies need lives outside this folder, study-neutral (engine, judges, stats, store, encoder,
contamination); a study never imports another study.
"""
from __future__ import annotations

import importlib
from types import ModuleType

# name -> module, in the order stages run them (HarmBench's baselines/__init__.py keeps this kind of map)
REGISTRY: dict[str, str] = {}

STAGES = ("items", "prompts", "generate", "judge", "analyse", "figures")


def register(name: str, module_path: str) -> None:
    """Add a study to the registry; a name registered twice is an error."""
    if name in REGISTRY:
        raise ValueError(f"study {name!r} is registered twice ({REGISTRY[name]} and {module_path})")
    REGISTRY[name] = module_path


register("kv", "refusal_audit.studies.kv")
register("frames", "refusal_audit.studies.frames")
register("confusion", "refusal_audit.studies.confusion")
register("policy", "refusal_audit.studies.policy")


def module(name: str) -> ModuleType:
    """The study's module, imported on first use. A study implements ``Params`` (its section's
    schema), ``check(p, where)`` (its section, without models or files), ``preflight(p, models)``
    (everything that can be checked without model weights) and one function per stage in ``STAGES``,
    plus ``summary(stage, table)`` for the notebooks."""
    if name not in REGISTRY:
        raise ValueError(f"unknown study {name!r}; expected one of {', '.join(REGISTRY)}")
    return importlib.import_module(REGISTRY[name])


def select(enabled: list[str], only: str | list[str] | None = None) -> list[str]:
    """The studies to run: ``only`` (a comma-separated string or a list; empty = every enabled study),
    checked against the registry and the params file's sections, without repeats."""
    names = [n.strip() for n in (only.split(",") if isinstance(only, str) else only or []) if n.strip()]
    if not names:
        return list(enabled)
    for n in names:
        if n not in REGISTRY:
            raise ValueError(f"STUDIES: unknown study {n!r}; expected some of {', '.join(REGISTRY)}")
        if n not in enabled:
            raise ValueError(f"STUDIES: study {n!r} has no section in the params file; "
                             f"the file enables {', '.join(enabled)}")
    dup = [n for i, n in enumerate(names) if n in names[:i]]
    if dup:
        raise ValueError(f"STUDIES: study {dup[0]!r} named twice")
    return [n for n in REGISTRY if n in names]
