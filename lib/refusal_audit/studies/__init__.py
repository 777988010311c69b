"""The studies, behind one registry: a name in a params file -> the study that runs it.

Each study is a package under ``studies/`` whose ``__init__`` defines a subclass of ``contract.Study`` (the
typed interface: every member the pipeline, report, verdict table, plan and ``make check`` call), its members
bound to the functions of its own modules. It is imported only when a params file has its section (or a
command asks for it). Code that two studies need lives outside this folder, study-neutral (engine, judges,
stats, store, encoder, contamination); a study never imports another study.
"""
from __future__ import annotations

import importlib

from .contract import Study, StudyError, describe, missing_member

# name -> "module:Class" (imported on first use) or the study itself, in the order stages run them
REGISTRY: dict[str, str | Study] = {}

STAGES = ("items", "prompts", "generate", "judge", "analyse", "figures")


def _validated(name: str, study) -> Study:
    """``study`` (a Study subclass or instance) as an instance; a study that lacks a required member, or whose
    ``name`` is not the one it is registered under, is refused with one line naming the study and the member."""
    cls = study if isinstance(study, type) else type(study)
    if not issubclass(cls, Study):
        raise StudyError(f"study {name!r}: {cls.__qualname__} is not a subclass of studies.contract.Study")
    member = missing_member(cls)
    if member:
        raise StudyError(f"study {name!r}: lacks the required member {member!r} of the study interface "
                         f"({describe(member)})")
    instance = study() if isinstance(study, type) else study
    if instance.name != name:
        raise StudyError(f"study {name!r}: its name member is {instance.name!r}; expected {name!r}")
    return instance


def register(name: str, study: str | type[Study] | Study) -> None:
    """Add a study: ``"package.module:Class"`` (checked when first used) or the class itself (checked now);
    a name registered twice, or a study missing a required member, is an error."""
    if name in REGISTRY:
        raise ValueError(f"study {name!r} is registered twice ({REGISTRY[name]} and {study})")
    REGISTRY[name] = study if isinstance(study, str) else _validated(name, study)


def unregister(name: str) -> None:
    """Remove a study (a test's fifth study, when the test is done)."""
    REGISTRY.pop(name, None)


register("kv", "refusal_audit.studies.kv:Kv")
register("frames", "refusal_audit.studies.frames:Frames")
register("confusion", "refusal_audit.studies.confusion:Confusion")
register("policy", "refusal_audit.studies.policy:Policy")


def get(name: str) -> Study:
    """The study registered as ``name``, imported and checked on first use."""
    if name not in REGISTRY:
        raise ValueError(f"unknown study {name!r}; expected one of {', '.join(REGISTRY)}")
    entry = REGISTRY[name]
    if isinstance(entry, str):
        module, _, cls = entry.partition(":")
        REGISTRY[name] = entry = _validated(name, vars(importlib.import_module(module))[cls])
    return entry


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
