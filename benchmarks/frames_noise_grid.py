"""The frames noise criterion's simulation grid at the default run's and the paper roster's designs
(``stats.simulate_noise_grid``; DEFINITIONS.md "Beyond paraphrase noise"): per design and subset, the
item count, the decodes per cell and the declared family's size read from the params file, and the grid
(frame effect 0-0.8 incl. the seed's 3.6 and 11.8 points x random-sign swing SD 0-0.9, 300 replicates; the
mean-square noise comparison and the primary contrast). Writes
``benchmarks/frames_noise_grid.csv`` and prints the size (largest share called beyond over the null cells)
and the power at each design, with the CPU seconds each grid took.

    PYTHONPATH=lib OMP_NUM_THREADS=1 .venv/bin/python benchmarks/frames_noise_grid.py
"""
from __future__ import annotations

import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd  # noqa: E402

from refusal_audit import config, stats  # noqa: E402
from refusal_audit.paths import ROOT  # noqa: E402
from refusal_audit.studies.frames import confirmatory  # noqa: E402
from refusal_audit.studies.frames import items as frame_items
from refusal_audit.studies.frames import params as fparams  # noqa: E402

OUT = Path(__file__).with_suffix(".csv")


def designs():
    """(design, subset, n_items, n_decodes, family size) of the default and paper frames params."""
    for name in ("params/default.yaml", "params/paper/frames_roster.yaml"):
        p = config.load(ROOT / name)
        fr = p.studies["frames"]
        counts = fr.data.counts()
        it = frame_items(p, llm=False)
        drawn = sum(counts.values())
        # non-harmful share of the draw: benign items, and the borderline stratum's safe prompts in the file's proportion
        border = it[it["stratum"] == "borderline"]
        safe = 1 - border["category"].astype(str).str.startswith("contrast_").mean() if len(border) else 0
        non_harmful = round(counts.get("benign", 0) + counts.get("borderline", 0) * safe)
        kinds = fparams.judge_kinds(fr)
        family = len(fparams.declared_family(fr, kinds))
        for subset, n in (("all", drawn), ("non_harmful", non_harmful)):
            yield name, subset, n, confirmatory.n_decodes(fr), family


def main():
    grids = []
    for name, subset, n, decodes, family in designs():
        t0 = time.process_time()
        g = stats.simulate_noise_grid(n, decodes, family_size=family, seed=n)
        cpu = time.process_time() - t0
        null = g[g["null"]]
        print(f"{name} {subset}: {n} items x {decodes} decodes, family {family}: {cpu:.1f} s CPU; size "
              f"{null['rate_beyond'].max():.3f} over {len(null)} null cells")
        print(g.pivot_table(index="frame_effect", columns="swing_sd", values="rate_significant").round(2).to_string())
        grids.append(g.assign(design=name, subset=subset, cpu_s=round(cpu, 2)))
    pd.concat(grids, ignore_index=True).round(4).to_csv(OUT, index=False)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
