"""The frames tests' size and power over effect SHAPES (DEFINITIONS.md "Beyond paraphrase noise"),
outside ``make all``: the frame effect on 100 / 50 / 25 % of the items x the rewording swing on 100 / 50 / 25 %
of them, at the noise criterion's own null boundary (true mean F^2 = true mean P^2: swing SD = effect x
sqrt(frame share / swing share), and 5 % above it), and the primary contrast's and the noise comparison's power
at the seed's effect sizes (+11.8 and 3.6 points, and +20) against swing SDs 0, 0.1 and 0.3, at 36 items x 3
decodes (the default run; Holm family 33), 180 x 7 and 480 x 7 (the paper roster's subsets; family 69).
``stats.simulate_noise_grid``, 1,000 replicates per cell. Writes ``benchmarks/frames_shapes.csv``, which the
run reads (``studies/frames/shapes.py``); prints the worst size over the boundary cells and the CPU seconds.

    PYTHONPATH=lib OMP_NUM_THREADS=1 .venv/bin/python benchmarks/frames_shapes.py [--reps 1000]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from refusal_audit import stats

OUT = Path(__file__).with_suffix(".csv")
SIZES = ((36, 3, 33), (180, 7, 69), (480, 7, 69))      # items, decodes, Holm family
SHARES = (1.0, 0.5, 0.25)
BOUNDARY_EFFECTS = (0.1, 0.2, 0.4)
SEED_EFFECTS = (0.0, 0.036, 0.118, 0.2)
SEED_SWINGS = (0.0, 0.1, 0.3)


def cells(reps: int):
    for n, decodes, family in SIZES:
        for fs in SHARES:
            for ss in SHARES:
                for e in BOUNDARY_EFFECTS:
                    sd = e * np.sqrt(fs / ss)
                    g = stats.simulate_noise_grid(n, decodes, [e], [sd, 1.05 * sd], reps=reps, seed=n + int(100 * e),
                                                  family_size=family, frame_share=fs, swing_share=ss)
                    yield g.assign(kind="boundary")
                g = stats.simulate_noise_grid(n, decodes, SEED_EFFECTS, SEED_SWINGS, reps=reps, seed=n + 7,
                                              family_size=family, frame_share=fs, swing_share=ss)
                yield g.assign(kind="seed sizes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    reps = ap.parse_args().reps
    t0 = time.process_time()
    out = pd.concat(cells(reps), ignore_index=True)
    cpu = time.process_time() - t0
    b = out[(out["kind"] == "boundary") & out["null"]]
    worst = b.loc[b["rate_beyond"].idxmax()]
    print(f"{len(out)} cells, {reps} replicates each, {cpu:.0f} s CPU; worst size over {len(b)} null boundary cells "
          f"{worst['rate_beyond']:.3f} ({int(worst['n_items'])} items, frame {worst['frame_effect']} on "
          f"{worst['frame_share']:.0%}, swing SD {worst['swing_sd']:.3f} on {worst['swing_share']:.0%})")
    s = out[out["kind"] == "seed sizes"]
    print(s.pivot_table(index=["n_items", "frame_share", "swing_share", "swing_sd"], columns="frame_effect",
                        values="rate_significant").round(3).to_string())
    out.round(5).assign(cpu_s=round(cpu, 1)).to_csv(OUT, index=False)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
