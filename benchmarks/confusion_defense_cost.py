"""What a defense arm of the confusion study costs on this machine: the generation stage (token signals, the pair
signals and the greedy replies) of the defended model on the defense arms' prompts, undefended and under each defense
of a params file, timed back to back (alternating, ``--repeats`` times), from an items table of a finished run.

    .venv/bin/python benchmarks/confusion_defense_cost.py results/default/confusion/items.parquet [--params ...]

Prints seconds per arm and repeat; the default run's budget needs the defense arms' generation to stay near 15 s.
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path

import pandas as pd

from refusal_audit import config, models, store
from refusal_audit.studies.confusion import defenses as D
from refusal_audit.studies.confusion import stages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("items")
    ap.add_argument("--params", default="params/default.yaml")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    p = config.load(args.params)
    c = p.studies["confusion"]
    items = pd.read_parquet(args.items)
    pool = models.Pool(p.models)
    built = stages.prompts(p, items, pool)
    base = c.defended or c.models[0]
    chosen = D.chosen_clusters(items[items["included"]], c.defense_clusters, p.seed)
    pool.load(base)  # loaded once, outside the timings
    arms = [(base, None)] + [(D.arm(base, d), d) for d in c.defenses]
    for repeat in range(args.repeats):
        for arm, defense in arms:
            rows = built[(built["model"] == arm) & built["cluster"].isin(chosen)]
            one = dataclasses.replace(c, models=[base], defenses=[defense] if defense else [])
            q = dataclasses.replace(p, run_name=f"bench-{repeat}-{arm}", studies={**p.studies, "confusion": one})
            with tempfile.TemporaryDirectory() as tmp:
                q = dataclasses.replace(q, run_name=str(Path(tmp) / "run"))
                started = time.perf_counter()
                stages.generate(q, rows, pool, store.ShardStore(Path(tmp) / "shards"))
                took = time.perf_counter() - started
            print(f"repeat {repeat}: {arm}: {len(rows)} prompts, {rows['prompt_tokens'].mean():.0f} tokens each, "
                  f"generation stage {took:.1f} s", flush=True)


if __name__ == "__main__":
    main()
