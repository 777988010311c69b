"""The policy study's verdicts in words: the sentences that end its part of notebook 05 and open the report
(the known answers, the arms beside their last supervision signal, released guards, the rule's calibration,
the confirmatory rank test and its sensitivity analysis)."""
from __future__ import annotations

import pandas as pd

from .following import sentences
from .simulation import trust_line


def verdicts(p, tables: dict[str, pd.DataFrame]) -> list[str]:
    """The study's verdicts in words, from its tables (the end of notebook 05 and the top of report.html):
    the known answers (synthetic guards), the arms' verdicts beside their last supervision signal, the
    confirmatory rank test (Holm) on the policy-loaded and capability-loaded benchmarks, released guards."""
    alpha = p.stats.alpha
    out = []
    gv = tables.get("guard_verdict")
    if gv is not None and len(gv):
        gv = gv[~gv["guard"].astype(str).str.contains("|", regex=False)]
        syn = gv[gv["kind"] == "synthetic"].set_index("guard")
        if len(syn):
            got = ", ".join(f"{g} -> {r.follows}" for g, r in syn.iterrows())
            ok = bool(syn["names_own_signal"].astype(str).eq("True").all())
            out.append(f"Known answers: the synthetic guards built from the study's own labels come out {got} "
                       f"({'all recovered' if ok else 'NOT all recovered'}; alpha = {alpha}; "
                       f"{int(syn['n_disputed'].iloc[0])} disputed items).")
        arm = gv[(gv["kind"] == "arm") & gv["last_signal"].isin(["a", "b"])]
        if len(arm):
            named = arm["names_own_signal"].astype(str).eq("True")
            detail = "; ".join(f"{r.guard} [{r.last_signal.upper()}] -> {r.follows}" for r in arm.itertuples())
            out.append(f"The verdict names the arm's own last supervision signal for {int(named.sum())} of {len(arm)} "
                       f"arms whose last signal is A or B ({detail}).")
        for r in sentences(gv[gv["kind"] == "guard"], alpha, tables.get("guard_positions")):
            out.append(r)
        out.append(trust_line(tables.get("verdict_calibration")))
    rank, sens = tables.get("rank_test"), tables.get("sensitivity")
    if rank is not None and len(rank) and sens is not None and "p_toward_a_holm" in rank:
        r = rank.merge(sens[["benchmark", "group"]], on="benchmark", how="left")
        for group, g in r.groupby("group", sort=True):
            sig = g[g["p_toward_a_holm"] < alpha]
            top = g[g["designated_take_top_k"].astype(str) == "True"]
            out.append(f"Rank test at each arm's operating point ({group}, {len(g)} benchmarks): the arms whose "
                       f"last signal is A take the top "
                       f"ranks on {len(top)} ({', '.join(top['benchmark']) or 'none'}); Holm-adjusted one-sided "
                       f"p < {alpha} on {len(sig)} ({', '.join(sig['benchmark']) or 'none'}); family = the "
                       f"one-sided test on all {len(rank)} benchmarks.")
    half = tables.get("rank_test_at_half")
    if half is not None and len(half) and sens is not None and "p_toward_a_holm" in half:
        h = half.merge(sens[["benchmark", "group"]], on="benchmark", how="left")
        sig = h[h["p_toward_a_holm"] < alpha]
        out.append(f"Sensitivity analysis (the first analysis, every arm at P(unsafe) >= 0.5; the operating-point "
                   f"conditioning was adopted after it, DEFINITIONS.md): Holm-adjusted one-sided p < {alpha} on "
                   f"{len(sig)} benchmarks ("
                   + (", ".join(f"{r.benchmark} [{r.group}]" for r in sig.itertuples()) or "none") + ").")
    return out
