"""The committed shape benchmark (``benchmarks/frames_shapes.py`` -> ``benchmarks/frames_shapes.csv``), read by
the run: the noise comparison's worst size over effect shapes at its null boundary, and the primary contrast's
and the noise comparison's power at the seed's effect sizes at the paper roster's size (DEFINITIONS.md)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...config import ParamsError
from ...paths import ROOT

TABLE = ROOT / "benchmarks" / "frames_shapes.csv"
COLUMNS = ("kind", "n_items", "n_decodes", "frame_share", "swing_share", "frame_effect", "swing_sd", "null",
           "rate_beyond", "rate_significant", "rate_detect", "reps")


def read(path: Path = TABLE) -> pd.DataFrame | None:
    """The benchmark table, or None when it was never written; bad content stops with one line naming the file
    and the column."""
    if not path.is_file():
        return None
    t = pd.read_csv(path)
    for c in COLUMNS:
        if c not in t:
            raise ParamsError(f"{path}: column {c!r} missing (expected the columns of benchmarks/frames_shapes.py)")
    for c in ("frame_share", "swing_share"):
        bad = t[~t[c].between(0, 1, inclusive="right")]
        if len(bad):
            raise ParamsError(f"{path}: {c}: expected shares in (0, 1], got {bad[c].iloc[0]}")
    return t


def worst_size(t: pd.DataFrame) -> tuple[float, int, int]:
    """(largest share called beyond over the null boundary cells, how many such cells, replicates per cell)."""
    b = t[(t["kind"] == "boundary") & t["null"].astype(bool)]
    return float(b["rate_beyond"].max()), len(b), int(t["reps"].iloc[0])


def power_at(t: pd.DataFrame, n_items: int, swing_sd: float, effect: float, rate: str = "rate_significant") -> float:
    """The uniform shape's (frame and swing on every item) ``rate`` at ``n_items``, the smallest benchmarked
    swing SD at or above ``swing_sd`` (the largest when none is) and ``effect``; NaN if not benchmarked."""
    s = t[(t["kind"] == "seed sizes") & (t["n_items"] == n_items) & (t["frame_share"] == 1) & (t["swing_share"] == 1)]
    if not len(s):
        return float("nan")
    sds = np.sort(s["swing_sd"].unique())
    sd = sds[sds >= swing_sd - 1e-9][0] if (sds >= swing_sd - 1e-9).any() else sds[-1]
    r = s[np.isclose(s["swing_sd"], sd) & np.isclose(s["frame_effect"], effect)]
    return float(r[rate].iloc[0]) if len(r) else float("nan")
