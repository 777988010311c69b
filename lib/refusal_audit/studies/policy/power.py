"""The policy verdict rule's power at the disputed items a pool has, and the disputed items it needs (``make plan``'s
power line), from the calibration's own simulation of follower profiles on the pool's strata.

The search simulates up to ~80 x ``CALIBRATION_DRAWS`` guards (about a minute on two cores per params file), so the
power lines of the shipped params files are committed in ``benchmarks/policy_disputed_power.csv``, each under a key
that hashes everything the search reads (the strata and their item counts, alpha, seed, target power, draws, scales
and the rule's constants and version); ``run_disputed_for_power`` reads a line whose key matches and simulates any
other (``python benchmarks/policy_disputed_power.py`` rewrites the file).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from ... import stats
from . import simulation
from .following import MARGIN, MIN_ITEMS, MIN_SEPARATION, N_DRAWS, OUTSIDE, strata

SCALES = (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8)  # the multiples of the disputed strata the search tries
POWER = 0.8  # the power the fewest-items line aims at
POWER_FILE = Path(__file__).resolve().parents[4] / "benchmarks" / "policy_disputed_power.csv"


def power_key(rows: pd.DataFrame, alpha: float, seed: int, power: float = POWER,
              draws: int = simulation.CALIBRATION_DRAWS, scales=SCALES) -> str:
    """What ``disputed_for_power`` reads of ``rows`` and its arguments, hashed: the strata with their item counts,
    alpha, seed, power, draws, scales and the rule's constants and calibration version."""
    table, _ = strata(rows)
    rule = repr((MARGIN, MIN_ITEMS, MIN_SEPARATION, N_DRAWS, OUTSIDE, simulation.CALIBRATION_VERSION, alpha, seed,
                 power, draws, tuple(scales)))
    return hashlib.sha256((rule + table.to_csv(index=False)).encode()).hexdigest()[:16]


def run_disputed_for_power(rows: pd.DataFrame, alpha: float, seed: int) -> pd.DataFrame:
    """``disputed_for_power`` at the plan's power, draws and scales: the committed lines of ``POWER_FILE`` whose key
    matches these rows, else simulated here."""
    key = power_key(rows, alpha, seed)
    if POWER_FILE.is_file():
        table = pd.read_csv(POWER_FILE, keep_default_na=False)
        hit = table[table["key"] == key]
        if not hit.empty:
            return hit.drop(columns="key").reset_index(drop=True).astype(
                {"n_disputed": int, "power": float, "needed": int})
    return disputed_for_power(rows, alpha, seed)


def disputed_for_power(rows: pd.DataFrame, alpha: float, seed: int, power: float = POWER,
                       draws: int = simulation.CALIBRATION_DRAWS, scales=SCALES) -> pd.DataFrame:
    """``make plan``'s power line, from the calibration's own simulation (``simulation.simulate``): per follower
    profile (typical A and B, and their borderline variants), the power at the disputed items of
    ``rows``, and the fewest disputed items at which the rule reaches ``power``, growing only the
    strata that need it (growing every stratum overstates the items a pool must add): the B-stricter
    strata alone, the A-stricter alone, or every disputed stratum, each scaled by ``scales`` (the
    undisputed strata kept); ``grow`` says which
    (``none`` where the items available suffice: then the fewest at a smaller scale of them all);
    ``needed`` -1 when none does."""
    table, _ = strata(rows)
    cls = table["cls"].to_numpy()
    disputed = cls >= 2
    code = stats.VERDICT_CODES.index

    def share(name, mask, c):
        t = table.assign(n_items=np.where(mask, np.maximum(np.round(c * table["n_items"]), 1),
                                          table["n_items"]).astype(int))
        v = simulation.simulate(t, simulation.stratum_profiles(t)[name][2], draws, alpha, seed).verdict
        return float((v == code(name[8])).mean()), int(t.loc[disputed, "n_items"].sum())

    out = []
    for name in ("follows_A", "follows_B", "follows_A_borderline", "follows_B_borderline"):
        at_one, n_now = share(name, disputed, 1)
        found, grow = -1, ""
        if at_one >= power:
            found, grow = n_now, "none"
            for c in sorted(x for x in scales if x < 1):
                got, n = share(name, disputed, c)
                if got >= power:
                    found = n
                    break
        else:
            for which, mask in (("the B-stricter strata only", cls == 3), ("the A-stricter strata only", cls == 2),
                               ("every disputed stratum", disputed)):
                for c in sorted(x for x in scales if x > 1):
                    got, n = share(name, mask, c)
                    if got >= power:
                        if found < 0 or n < found:
                            found, grow = n, which
                        break
        out.append({"profile": name, "n_disputed": n_now, "power": at_one, "needed": found, "grow": grow})
    return pd.DataFrame(out)

