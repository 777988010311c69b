"""Where the repository keeps its inputs and outputs."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT / "data"
PARAMS_DIR = ROOT / "params"
FIGURES_DIR = ROOT / "figures"
ORGANISM_ADAPTER = ROOT / "organism" / "smollm2-135m-guarded"  # the refusing organism's LoRA adapter (a testbed)
RESULTS_DIR = Path(os.environ.get("REFUSAL_AUDIT_RESULTS", ROOT / "results"))


def run_dir(run_name: str) -> Path:
    """``results/<run_name>/``: everything one run writes."""
    return RESULTS_DIR / run_name


def study_dir(run_name: str, study: str) -> Path:
    """``results/<run_name>/<study>/``: the study's own tables (its stage tables, its extra tables, its shards)."""
    return run_dir(run_name) / study
