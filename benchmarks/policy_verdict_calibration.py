"""The policy verdict's calibration on the default run's guard items, committed
as ``benchmarks/policy_verdict_calibration.csv`` and read by the run (``simulation.run_calibration``)
when its items, alpha, seed, draws and rule match the table's ``key``; any other run simulates its
own. 31 profiles x 500 simulated guards x 1,000 posterior draws: ~30 s on two cores, more than
make all may spend. Usage:

    .venv/bin/python benchmarks/policy_verdict_calibration.py [params/default.yaml]
"""
from __future__ import annotations

import sys
import time

from refusal_audit import config
from refusal_audit.studies.policy import NAME, simulation
from refusal_audit.studies.policy.answers import scored_rows
from refusal_audit.studies.policy.stages import split_items


def main(params_file: str = "params/default.yaml") -> None:
    p = config.load(params_file)
    s = p.studies[NAME]
    rows = scored_rows(split_items(p))
    t = time.time()
    key = simulation.calibration_key(rows, p.stats.alpha, p.seed, s.calibration_draws)
    cal = simulation.calibration(rows, p.stats.alpha, p.seed, s.calibration_draws).assign(key=key)
    cal.to_csv(simulation.CALIBRATION_FILE, index=False)
    print(cal.drop(columns=["description", "key"]).round(3).to_string())
    print(simulation.trust_line(cal))
    print(f"{simulation.CALIBRATION_FILE}: {len(cal)} profiles in {time.time() - t:.0f} s")


if __name__ == "__main__":
    main(*sys.argv[1:])
