"""``make plan`` for the policy study: its grid from params alone (the released guards' passes) and the lines
under it (the disputed items a verdict rests on and the verdict rule's power at them)."""
from __future__ import annotations

import pandas as pd

from ... import plan as P
from . import power, simulation
from .params import NAME
from .stages import pool


def plan(p) -> pd.DataFrame:
    """The grid from params alone (the pool is read and split to count rows): each released guard on the
    benchmark rows (before the contamination audit drops unclean ones: an upper bound), one greedy
    verdict each. The arms train on CPU and are not in the grid."""
    s = p.studies[NAME]
    bench = pool(p)
    bench = bench[bench["role"] == "benchmark"]
    per = P.CHAT_OVERHEAD + 150 + P.tokens("x" * round(bench["prompt"].astype(str).str.len().mean()))  # + the policy
    rows = []
    for g in s.guards:
        sizes = bench.groupby("benchmark").size()
        n = int(sizes.clip(upper=g.per_benchmark).sum() if g.per_benchmark else sizes.sum())
        rows.append(P.row(NAME, g.model, f"guard {g.convention}", n, 1, 1, per, g.max_new_tokens))
    return P.frame(rows)


def plan_notes(p) -> list[str]:
    """``make plan``: the disputed items a verdict rests on (benchmark rows whose binary labels under A
    and B differ, before the audit drops contaminated ones), their categories, the pool's binary
    disagreement, and the power of the verdict rule itself (``power.run_disputed_for_power``: the
    calibration's simulation, ``simulation.CALIBRATION_DRAWS`` guards per profile) at the disputed items
    available and the disputed items it needs for 80 % power."""
    split = pool(p)
    bench = split[split["role"] == "benchmark"]
    d = bench[bench["unsafe_a"] != bench["unsafe_b"]]
    cats = d.groupby(["benchmark", "rule_a", "rule_b"]).size()
    need = power.run_disputed_for_power(bench, p.stats.alpha, p.seed)
    return [f"policy: {len(d)} disputed benchmark rows (before the audit) in {d['benchmark'].nunique()} benchmarks and "
            f"{len(cats)} categories (benchmark x rule under A x rule under B); binary A/B disagreement on the pool "
            f"{(split['unsafe_a'] != split['unsafe_b']).mean():.1%}",
            f"policy: the verdict rule (both directions; {simulation.CALIBRATION_DRAWS} simulated guards per profile, as in "
            f"verdict_calibration.csv) at alpha = {p.stats.alpha}: power with the {len(d)} disputed rows available, and "
            "the disputed rows it needs for 80 %, growing only the strata that need it: "
            + "; ".join(f"{r.profile} {r.power:.0%}, needs "
                        + (f"{r.needed} ({'this mix of rule pairs' if r.grow == 'none' else 'growing ' + r.grow})"
                           if r.needed > 0 else f"more than {8 * len(d)}")
                        for r in need.itertuples())]
