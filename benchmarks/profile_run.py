"""Profile of a run by stage and by study (a benchmark, not a test): wall, CPU and peak memory.

Runs the params file's stages as the notebooks do (items with the contamination audit, prompts,
generate, judge, analyse, figures), one study at a time, in a fresh results folder, and prints one row
per (stage, study): wall seconds, CPU seconds (this process and its threads), the process's peak
resident memory so far, and the share of the total wall. Nothing is cached between rows except the
model pool (as in ``make all``, which loads each model once). A last line sums the stages.

    .venv/bin/python benchmarks/profile_run.py                       # params/default.yaml, every study
    .venv/bin/python benchmarks/profile_run.py params/ci.yaml --studies kv,frames
"""
from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from refusal_audit import paths, pipeline  # noqa: E402

STAGES = ("items", "prompts", "generate", "judge", "analyse", "figures")


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("params", nargs="?", default="params/default.yaml")
    ap.add_argument("--studies", default="")
    args = ap.parse_args()

    paths.RESULTS_DIR = Path(tempfile.mkdtemp(prefix="profile_run_"))
    names = pipeline.Run(args.params, args.studies).names
    rows = []

    def timed(stage: str, name: str, work) -> None:
        w0, c0 = time.perf_counter(), time.process_time()
        work()
        rows.append((stage, name, time.perf_counter() - w0, time.process_time() - c0, peak_gb()))
        print(f"{stage:9s} {name:10s} wall {rows[-1][2]:7.1f} s  cpu {rows[-1][3]:7.1f} s  "
              f"peak {rows[-1][4]:.2f} GB", flush=True)

    everything = pipeline.Run(args.params, args.studies)
    pipeline.preflight(everything.p, everything.models, names)
    for stage in STAGES:
        for name in names:
            run = pipeline.Run(args.params, name)
            run.models = everything.models
            if stage == "items":  # the items alone; the audit of every study's items once, below
                timed(stage, name, lambda run=run: run._stage("items", lambda n, s, run=run: s.items(run.p)))
            else:
                timed(stage, name, getattr(run, stage))
        if stage == "items":
            timed("items", "audit", everything.audit)
    total = sum(r[2] for r in rows)
    print("\n| stage | study | wall s | CPU s | peak RSS GB | share |\n|---|---|---|---|---|---|")
    for stage, name, wall, cpu, peak in rows:
        print(f"| {stage} | {name} | {wall:.1f} | {cpu:.1f} | {peak:.2f} | {wall / total:.0%} |")
    for stage in STAGES:
        print(f"| {stage} | (all) | {sum(r[2] for r in rows if r[0] == stage):.1f} | "
              f"{sum(r[3] for r in rows if r[0] == stage):.1f} | | |")
    print(f"total wall {total:.1f} s, CPU {sum(r[3] for r in rows):.1f} s, peak RSS {peak_gb():.2f} GB "
          f"({', '.join(names)}; {args.params}; results in {paths.RESULTS_DIR})")


if __name__ == "__main__":
    main()
