"""The confirmatory test of the policy study: the exchangeability rank test of the arms whose last supervision
signal is policy A, per benchmark, one-sided toward A's labels (Holm over the benchmarks tested), each arm taken
at its operating point (the P(unsafe) threshold at which it flags the share of the undisputed validation rows
their labels call unsafe): where the policies agree a stricter prior then buys no rank; where they differ the
arm's last supervision signal still shows. At P(unsafe) >= 0.5 the same test is the sensitivity analysis."""
from __future__ import annotations

import math

import pandas as pd

from ... import stats
from . import design


def operating_points(generations: pd.DataFrame, items: pd.DataFrame, arm_names: list[str], seed: int) -> pd.DataFrame:
    """Per arm (run seed): the P(unsafe) threshold at which it flags the same share of the undisputed
    validation rows (A's and B's binary labels agree) as those rows' labels do. An arm that flags more
    everywhere (a stricter prior, or more capacity) then ranks with the others wherever the policies
    agree, and only where they differ can its last supervision signal show."""
    val = items[(items["role"] == "validation") & ~items["disputed_binary"].astype(bool)]
    if val.empty:
        raise ValueError("policy operating points: no undisputed validation rows (policy.split.validation is 0?)")
    share = float(val["unsafe_a"].astype(bool).mean())
    g = generations[(generations["seed"] == seed) & generations["model"].isin(arm_names)
                    & generations["item_id"].isin(set(val["item_id"]))]
    t = g.groupby("model")["p_unsafe"].quantile(1 - share).rename("threshold").reset_index()
    t["flagged_share"] = share
    t["n_validation"] = len(val)
    return t


def conditioned_scores(generations: pd.DataFrame, items: pd.DataFrame, points: pd.DataFrame, seed: int) -> pd.DataFrame:
    """Per arm and benchmark (clean rows, run seed): the share flagged at the arm's operating point
    (``operating_points``), in the columns ``rank_tests`` reads."""
    clean = items[(items["role"] == "benchmark") & items["clean"].astype(bool)][["item_id", "benchmark"]]
    g = generations[(generations["seed"] == seed) & generations["model"].isin(points["model"])]
    g = g.merge(clean, on="item_id")
    g["flag"] = g["p_unsafe"] >= g["model"].map(points.set_index("model")["threshold"])
    out = g.groupby(["model", "benchmark"])["flag"].mean().rename("rate").reset_index()
    return out.assign(seed=seed, subset="clean")


def rank_tests(score_table: pd.DataFrame, arm_names: list[str], designated: list[str], seed: int,
               toward: dict[str, str] | None = None) -> pd.DataFrame:
    """Per benchmark: the exchangeability rank test of the arms whose last supervision is policy A
    (clean rows, run seed): one-sided toward A's labels (``toward[benchmark]``: ``greater`` where A's
    labels call more of its rows unsafe than B's, ``less`` where fewer; default ``greater``) and
    two-sided, beside 1/C(n, k). ``designated_take_top_k``: they take the k most extreme ranks on
    that side."""
    s = score_table[(score_table["subset"] == "clean") & (score_table["seed"] == seed)
                    & score_table["model"].isin(arm_names)]
    rows = []
    for b, g in s.groupby("benchmark", sort=False):
        x = g.set_index("model")["rate"]
        present = [a for a in designated if a in x.index]  # an arm may lack a benchmark: test the arms present
        k = len(present)
        if not 0 < k < len(x):
            continue
        side = (toward or {}).get(b, "greater")
        one = stats.exchangeability_rank_test(x, present, side)
        two = stats.exchangeability_rank_test(x, present, "two-sided")
        y = x if side == "greater" else -x
        top = set(y.sort_values(ascending=False).index[:k])
        rows.append({"benchmark": b, "toward_a": side, "n": one.n, "k": one.k, "rank_sum": one.rank_sum,
                     "p_toward_a": one.pvalue, "p_two_sided": two.pvalue,
                     "one_over_n_choose_k": 1 / math.comb(one.n, one.k),
                     "designated_take_top_k": top == set(present) and y[present].min() > y.drop(present).max(),
                     "min_designated": x[present].min(), "max_other": x.drop(present).max()})
    cols = ["benchmark", "toward_a", "n", "k", "rank_sum", "p_toward_a", "p_two_sided", "one_over_n_choose_k",
            "designated_take_top_k", "min_designated", "max_other"]
    out = pd.DataFrame(rows, columns=cols)
    # the confirmatory family: the one-sided test on every benchmark tested; Holm over that family only
    # (the two-sided p is descriptive)
    out.insert(out.columns.get_loc("p_toward_a") + 1, "p_toward_a_holm", stats.holm(out["p_toward_a"]))
    order = {b: i for i, b in enumerate(design.BENCHMARKS)}
    return out.sort_values("benchmark", key=lambda c: c.map(order)).reset_index(drop=True)
