"""``make plan``'s policy power line for every shipped params file with a policy study, committed as
``benchmarks/policy_disputed_power.csv`` (one block of lines per distinct key: ``power.power_key``) and read by
``power.run_disputed_for_power`` when a plan's strata, alpha and seed match; any other plan simulates its own. About
a minute per distinct key on two cores. Usage:

    .venv/bin/python benchmarks/policy_disputed_power.py
"""
from __future__ import annotations

import time

import pandas as pd

from refusal_audit import config
from refusal_audit.paths import PARAMS_DIR
from refusal_audit.studies.policy import NAME, power
from refusal_audit.studies.policy.stages import pool


def main() -> None:
    blocks: dict[str, pd.DataFrame] = {}
    for path in sorted(PARAMS_DIR.rglob("*.yaml")):
        p = config.load(path)
        if NAME not in p.studies:
            continue
        split = pool(p)
        bench = split[split["role"] == "benchmark"]
        key = power.power_key(bench, p.stats.alpha, p.seed)
        t = time.time()
        if key not in blocks:
            blocks[key] = power.disputed_for_power(bench, p.stats.alpha, p.seed).assign(key=key)
        print(f"{path.relative_to(PARAMS_DIR)}: key {key} ({time.time() - t:.0f} s)")
        print(blocks[key].drop(columns="key").to_string(index=False))
    pd.concat(blocks.values()).to_csv(power.POWER_FILE, index=False)
    print(f"{power.POWER_FILE}: {len(blocks)} keys")


if __name__ == "__main__":
    main()
