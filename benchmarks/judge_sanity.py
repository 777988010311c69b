"""Each judge's sanity per model (``judge_sanity``), as the statistics stage computes it, on a run's own replies (the
default models: testbeds, never evidence about production models) and on two synthetic models whose replies are the
check set's own hand-written replies (their kind known by construction), with the time each study's table takes
(what it adds to the run's statistics stage; the first includes loading the MiniLM encoder).

    PYTHONPATH=lib .venv/bin/python benchmarks/judge_sanity.py [--params params/default.yaml]

Reads ``results/<run>/<study>/{generations,judgments}.parquet`` of every study of the params that has them (run
``make all`` first, or its stages up to judging).
"""
from __future__ import annotations

import argparse
import time

import pandas as pd

from refusal_audit import config, datasets, judge_sanity, judges
from refusal_audit.paths import ROOT, run_dir
from refusal_audit.studies.confusion import stages as confusion_stages
from refusal_audit.studies.frames import stages as frames_stages
from refusal_audit.studies.kv import stages as kv_stages

SANITY = {"kv": lambda p, items, gens, judged: kv_stages.sanity(p, gens, judged),
          "frames": lambda p, items, gens, judged: frames_stages.sanity(p, gens, judged),
          "confusion": confusion_stages.sanity}
# two synthetic models: one replies with bare compliance openings or hard refusals or degenerate text, one with soft
# refusals or factual answers (each check reply's number is its item: h01, o01, d01 share one)
SYNTHETIC = {"synthetic-openings": ("hard_refusal", "compliance_opening", "degenerate"),
             "synthetic-soft": ("soft_refusal", "factual_answer")}


def show(name: str, t: pd.DataFrame, used: list[str]) -> None:
    checks = t[t["part"] == judge_sanity.CHECK]
    if len(checks):
        print(f"\n{name}: the fixed check set, accuracy per kind (* held kind below the floor)")
        cell = checks.assign(cell=[f"{v:.2f}{'*' if b else ''}" if pd.notna(v) else "not scored"
                                   for v, b in zip(checks["value"], checks["below"])])
        print(cell.pivot(index="judge", columns="measure", values="cell")[list(datasets.CHECK_KINDS)].to_string())
    agree = t[t["part"] == judge_sanity.AGREEMENT]
    if len(agree):
        print(f"\n{name}: Cohen's kappa [95 % item-cluster bootstrap] per model, each judge against each other")
        agree = agree.assign(cell=[f"{v:.2f} [{lo:.2f}, {hi:.2f}] n {n}" if pd.notna(v) else note
                                   for v, lo, hi, n, note in agree[["value", "lo", "hi", "n", "note"]].itertuples(
                                       index=False)])
        print(agree[agree["judge"] < agree["other"]][["model", "judge", "other", "cell"]].to_string(index=False))
    for model in dict.fromkeys(agree["model"]):
        for f in judge_sanity.flags(t, model, used):
            print(f"  FLAG {model}: {f}")


def synthetic(p) -> pd.DataFrame:
    checks = datasets.judge_checks()
    gens, parts = [], []
    built = judges.build(p)
    for model, kinds in SYNTHETIC.items():
        mine = checks[checks["kind"].isin(kinds)]
        gens.append(pd.DataFrame({"generation_id": model + ":" + mine["id"], "model": model,
                                  "item_id": mine["id"].str[1:], "prompt": mine["prompt"], "reply": mine["text"]}))
    gens = pd.concat(gens, ignore_index=True)
    parts = judges.judge_replies(built, gens)
    return judge_sanity.table(p, parts, gens, {j.name: j.name for j in built})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params/default.yaml")
    args = ap.parse_args(argv)
    p = config.load(ROOT / args.params)
    pd.set_option("display.width", 250)
    total = 0.0
    for study, fn in SANITY.items():
        folder = run_dir(p.run_name) / study
        if study not in p.studies or not (folder / "judgments.parquet").is_file():
            print(f"\n{study}: no judgments in {folder} (run its stages first)")
            continue
        items, gens, judged = (pd.read_parquet(folder / f"{t}.parquet") for t in ("items", "generations", "judgments"))
        start = time.perf_counter()
        t = fn(p, items, gens, judged)
        took = time.perf_counter() - start
        total += took
        used = sorted(set(t["judge"]))
        show(f"{study} ({p.run_name}, {len(gens)} replies, {took:.1f} s)", t, used)
    print(f"\nthe run's sanity tables took {total:.1f} s in all (one process: the encoder loads once)")
    start = time.perf_counter()
    t = synthetic(p)
    show(f"synthetic models ({time.perf_counter() - start:.1f} s)", t, sorted(set(t["judge"])))
    print("\nsynthetic truth: " + "; ".join(f"{m}: {', '.join(k)}" for m, k in SYNTHETIC.items()))


if __name__ == "__main__":
    main()
