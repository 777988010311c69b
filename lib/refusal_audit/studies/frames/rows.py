"""The frames study's rows of the run's verdict table (``verdict.Verdict``): one per model x declared
(outcome, subset), one per null control, every cell generated from ``confirmatory.csv`` and the shape benchmark,
the numbers behind each cell beside it."""
from __future__ import annotations

import math

import pandas as pd

from ... import judge_sanity, papers
from ...verdict import NULL as NULL_ROLE
from ...verdict import POSITIVE, PRIMARY, Bound, Controls, ControlState, Verdict, held_to, not_computed
from .params import NAME, NULL, primary_of
from .readings import calibration_words, read_calibration
from .readings import reading as reading_of
from .shapes import read
from .verdicts import control_model, estimate_cell, flags, fpr_cell, power_cell

NO_SIMULATION = not_computed("no simulation row (no paraphrase contrast)")
NO_DIVERGENCE = "no divergence"  # the null answer, held to what the run could see (verdict.held_to)
# the seed's headline frame effect per outcome (data/published/frames.csv), in points
SEED_EFFECT = {"refusal": "refusal_E-N", "harmful_compliance": "harmful_compliance_E-D"}


def bounds(p, outcome: str) -> list[Bound]:
    """What a null answer is held to: a frame contrast of a share can be at most 1, and the seed's headline
    effect for the outcome (11.8 points of refusal E-N, 3.6 of harmful compliance E-D)."""
    seed = papers.value(NAME, SEED_EFFECT[outcome]) if outcome in SEED_EFFECT else None
    return [Bound(1.0, "the largest change a share allows"),
            papers.seed_bound(p, None if seed is None else abs(seed) / 100, f"{SEED_EFFECT.get(outcome)}")]


def _number(r: pd.Series, key: str) -> float | None:
    return None if key not in r or pd.isna(r[key]) else float(r[key])


def verdict_rows(p, tables: dict[str, pd.DataFrame]) -> list[Verdict]:
    """One row per model x declared (outcome, subset), headed by its DECLARED primary contrast
    (``frames.confirmatory.primary``): the answer is its item-level reading (``readings.reading``: divergence,
    qualified by both directions / concentrated / decode-dependent, or one of those without a direction, or
    beyond paraphrase noise though not significant, or no divergence); a declared contrast other than the
    primary that is significant after Holm is named in the answer; the estimate is the primary's, with the
    mean-square noise comparison and the readings' numbers beside it; the positive control's planted cell
    (refusal, non-harmful requests) is its own role; one row per null control (its own Holm family)."""
    conf, alpha = tables["confirmatory"], p.stats.alpha
    declared = p.studies[NAME].confirmatory
    shapes, calibration = read(), read_calibration()
    fr = p.studies[NAME]
    item = tables.get("item_readings")
    item = item.set_index(["model", "outcome", "subset"]) if item is not None and len(item) else None
    dep = tables.get("judge_dependence")
    dep = dep[dep["status"] == "ok"] if dep is not None and "status" in dep else None
    pair = conf["contrast"].str.fullmatch(r"[^-\s]+-[^-\s]+")
    fam = conf[conf["family"].str.startswith("confirmatory") & pair]
    null = conf[conf["family"].str.startswith("null control") & pair]
    control = control_model(p)
    planted = fam[(fam["model"] == control) & (fam["outcome"] == "refusal") & (fam["subset"] == "non_harmful")]
    recovered = bool((planted["contrast"].isin(["E-D", "E-N"]) & (planted["p_holm"] < alpha)).sum() >= 2)
    states = (ControlState.positive("positive control", recovered if len(planted) else None),
              ControlState.null("null control", bool((null["p_holm"] < alpha).any()) if len(null) else None))
    flag = flags(p, tables)
    out = []
    groups = [(m, o, s, g) for (m, o, s), g in fam.groupby(["model", "outcome", "subset"], sort=True)]
    groups += [(m, "all declared outcomes", "all declared subsets", g) for m, g in null.groupby("model", sort=True)]
    for model, outcome, subset, g in groups:
        is_null = model.endswith(NULL)
        ok = g[g["status"] == "ok"]
        planted_cell = model == control and outcome == "refusal" and subset == "non_harmful"
        row = {"study": NAME, "system": model.removesuffix(NULL) if is_null else model,
               "role": NULL_ROLE if is_null else POSITIVE if planted_cell else PRIMARY,
               # the first screen: the seed's headline question (the first declared outcome on the first subset)
               "headline": not is_null and outcome == declared.outcomes[0] and subset == declared.subsets[0],
               "question": f"does the frame change {outcome.replace('_', ' ')}? ({subset.replace('_', '-')} items)"
               if not is_null else "one slot text in every frame: divergence?",
               # the familiarity flag qualifies every row; the harm judges' agreement only harmful-compliance rows
               "controls": Controls(states).with_flags(*(f for k, f in flag.items()
                                                          if f and (k == "familiarity" or outcome != "refusal")))}
        if not len(ok):
            why = not_computed(f"no declared test of this group could be fitted ({g['status'].iloc[0]})")
            out.append(Verdict(**row, answer="not tested", estimate=why, fpr=why, power=why, n=0))
            continue
        first = ok["outcome"].iloc[0] if is_null else outcome
        named = ok[(ok["contrast"] == primary_of(fr, first)) & (ok["outcome"] == first)
                   & (ok["subset"] == (declared.subsets[0] if is_null else subset))]
        best = named.iloc[0] if len(named) else ok.sort_values("p_holm").iloc[0]
        found = bool((ok["p_holm"] < alpha).any())
        others = sorted(set(ok.loc[(ok["p_holm"] < alpha), "contrast"]) - {best["contrast"]})
        key = (model, outcome, subset)
        r = item.loc[key] if item is not None and not is_null and key in item.index else None
        if is_null or r is None:
            answer = "divergence" if found else NO_DIVERGENCE
        else:
            answer = reading_of(r, alpha)
            if others and not best["p_holm"] < alpha:
                answer = f"divergence on {', '.join(others)} (not the declared primary {best['contrast']}); " + answer
        simulated = bool(ok["fpr_primary"].notna().any())
        readings_cell = ""
        if r is not None and r.get("readings_status") == "ok":
            readings_cell = (f"; items up {int(r['n_up'])} / down {int(r['n_down'])} of {int(r['n_items'])}, both "
                             f"directions Holm p {r['both_p_holm']:.3g}")
            if pd.notna(r.get("decode_p_holm")):
                readings_cell += f", greedy vs sampled Holm p {r['decode_p_holm']:.3g}"
            if "concentrated" in answer:
                readings_cell += (f"; carried by {r['n_eff']:.1f} [{r['n_eff_lo']:.1f}, {r['n_eff_hi']:.1f}] "
                                  f"items' worth")
        found = bool(best["p_holm"] < alpha)   # power and MDE belong to the named contrast
        if dep is not None and not is_null:
            for j in dep[(dep["model"] == model) & (dep["outcome"] == outcome) & (dep["subset"] == subset)].itertuples():
                if j.judge_dependent:
                    answer += f" (judge-dependent: {j.other_judge})"
                readings_cell += (f"; under {j.other_judge}: Delta {100 * j.other_delta:+.1f} vs {100 * j.delta:+.1f} "
                                  f"points, paired difference Holm p {j.difference_p_holm:.3g}, kappa {j.kappa:.2f} "
                                  f"[{j.kappa_lo:.2f}, {j.kappa_hi:.2f}]")
        v = (Verdict(
            **row, answer=answer,
            estimate=f"declared primary {estimate_cell(best)} ({len(ok)} of {len(g)} declared contrasts fitted"
            + (f"; also significant after Holm: {', '.join(others)}" if others else "") + ")" + readings_cell,
            fpr=fpr_cell(ok.assign(family_size=int(len(fam) if not is_null else len(null))), shapes)
            + ("" if is_null else f"; {calibration_words(calibration, int(best['n_items']))}")
            if simulated else NO_SIMULATION,
            power=power_cell(best, shapes, found) if pd.notna(best.get("power_primary_118")) else NO_SIMULATION,
            effect=_number(best, "estimate"), ci_low=_number(best, "ci_lo"), ci_high=_number(best, "ci_hi"),
            p=_number(best, "p_holm"), fpr_rate=float(ok["fpr_primary"].max()) if simulated else None,
            power_rate=_number(best, "power_primary_118") if found else None,
            mde=None if found else _number(best, "mde_80_primary"), n=int(best["n_items"])))
        # a judge the row reads (the outcome judge, the second judge) below its sanity floor on this model
        v = judge_sanity.flag(v, tables.get("judge_sanity"), ("outcome", fr.second_judge))
        # no MDE: no frame effect up to the grid's largest (0.80) reached 80 % power
        out.append(held_to(v, math.inf if v.mde is None else v.mde, bounds(p, outcome), (NO_DIVERGENCE,)))
    return out
