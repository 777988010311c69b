"""``make own MODEL=path/to/model.gguf``: a params file for a researcher's own model, from the default params.

Every study section of ``params/default.yaml`` that runs language models (it has ``models`` or ``model``) is kept
with the user's model in place of the embedded ones (``reference_model`` too); the keys that name a control or a
reference model (``families.CONTROL_KEYS``: the positive and null controls, ``base_of``, ``interaction_reference``)
are dropped, since they name organisms built here on SmolLM2-135M, which control the pipeline for that model and not
for the user's; a section without a language model (a study of guards) is left out, its route being its own
commands. Sizes, families and simulation settings stay as the default declares them (declared before a run, never
tuned after one). See docs/own_model.md.
"""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from .families import CONTROL_KEYS
from .paths import PARAMS_DIR

HEADER = """# A params file for {model}, written by `make own` from params/default.yaml (docs/own_model.md).
# Dropped from the default: the embedded models and the organisms built on them, and every study key naming a
# control or a reference model ({dropped}):
# they control the pipeline for SmolLM2-135M, not for this model. A study whose section is absent here runs no
# language model (its route is its own command).
# Null answers below the seeds' effects read "cannot tell" (stats.seed_effect_bound: true).
"""


def name_of(source: str) -> str:
    """A short model name from its source (the file's or folder's stem, the hub id's name)."""
    stem = Path(source.rstrip("/")).name
    stem = re.sub(r"\.gguf$", "", stem, flags=re.I)
    return re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-").lower() or "mine"


def params_for(source: str, default: Path = PARAMS_DIR / "default.yaml") -> dict:
    """The default params rewritten for the model at ``source`` (see the module doc)."""
    raw = yaml.safe_load(Path(default).read_text())
    name = name_of(source)
    out = {"run_name": f"own-{name}", "seed": raw.get("seed", 0),
           "models": {name: {"source": source, "dtype": "float32"}}}
    for key in ("judges", "generation", "device"):
        if key in raw:
            out[key] = raw[key]
    out["stats"] = {**raw.get("stats", {}), "seed_effect_bound": True}
    for study, section in raw.items():
        if not isinstance(section, dict) or not ({"models", "model"} & set(section)):
            continue
        kept = {k: v for k, v in section.items() if k not in CONTROL_KEYS}
        if "models" in kept:
            kept["models"] = [name]
        if "model" in kept:
            kept["model"] = name
        if "reference_model" in kept:
            kept["reference_model"] = name
        if isinstance(kept.get("confirmatory"), dict) and kept["confirmatory"].get("models"):
            kept["confirmatory"] = {**kept["confirmatory"], "models": []}
        out[study] = kept
    return out


def write(source: str, out: str | Path) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = HEADER.format(model=source, dropped=", ".join(CONTROL_KEYS))
    path.write_text(text + yaml.safe_dump(params_for(source), sort_keys=False, width=110))
    return path
