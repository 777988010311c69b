"""The kv study's answer in words, generated from its tables (``confirmatory``, ``null_controls``,
``calibration``, ``human_agreement``): notebook 05 ends with it and report.html opens with it."""
from __future__ import annotations

import pandas as pd

from ... import stats
from . import simulation


def _could_have_seen(g: pd.DataFrame, alpha: float, family_size: int) -> str:
    """What the non-significant members of one model could have detected at their n (Holm's first step)."""
    quiet = g[~g["significant"].astype(bool)]
    out = []
    for n, h in quiet.groupby("n_pairs", sort=True):
        n, k = int(n), int(h["min_significant_pairs"].iloc[0])
        members = ", ".join(h["family_member"])
        if k:
            out.append(f"at n = {n} only a difference of at least {k / n:.3f} ({k} of {n} prompts dropping under "
                       f"one judge alone, none the other way) could have reached Holm significance over "
                       f"{family_size} members ({members})")
        else:
            need = stats.sign_flip_min_difference(1024, alpha, family_size)[1]
            out.append(f"at n = {n} no difference could have reached Holm significance over {family_size} members "
                       f"(it takes at least {need} prompts; {members})")
    return ("; ".join(out)[0].upper() + "; ".join(out)[1:] + ".") if out else ""


def confirmatory(p, conf: pd.DataFrame, family_size: int) -> list[str]:
    """Per model: each family member's difference with its CI and Holm p, how many are significant, and
    what the others could have seen."""
    kv = p.studies["kv"]
    c, alpha = kv.confirmatory, p.stats.alpha
    out = []
    for model, g in conf.groupby("model", sort=False):
        tag = " (TESTBED)" if model in p.models and p.models[model].testbed else ""
        parts = [f"{r.family_member}: {r.difference:+.2f} [{r.difference_lo:+.2f}, {r.difference_hi:+.2f}], "
                 f"Holm p {r.holm_p:.3g}" for r in g.itertuples()]
        hits = g[g["significant"].astype(bool)]
        line = (f"kv, {model}{tag}: the {c.monitor} monitor's refusal drop under eviction minus the {c.reference} "
                f"judge's, per arm (n = {int(g['n_pairs'].max())} prompts): " + "; ".join(parts)
                + f". {len(hits)} of {len(g)} family members significant after Holm at alpha {alpha}.")
        seen = _could_have_seen(g, alpha, family_size) if "min_significant_pairs" in g else ""
        out.append(line + (" " + seen if seen else ""))
    return out


def controls(p, conf: pd.DataFrame, nulls: pd.DataFrame | None) -> list[str]:
    """Whether the positive control was recovered and each null rejected, with each null's drops."""
    kv = p.studies["kv"]
    out = []
    for role, name in (("positive", kv.positive_control), ("null", kv.null_control)):
        if name is None or name not in set(conf["model"]):
            continue
        g = conf[conf["model"] == name]
        hit = bool(g["significant"].astype(bool).any())
        ok = hit if role == "positive" else not hit
        what = ("recovered: a significant monitor difference" if hit else "NOT recovered: no significant monitor "
                "difference") if role == "positive" else ("rejected: no significant monitor difference" if not hit
                                                        else "NOT rejected: a significant monitor difference")
        drops = f" ({_drops(g)})" if role == "null" else ""
        out.append(f"kv {role} control {name}: {what}{drops}{'' if ok else ' (the study failed its control)'}.")
    if nulls is not None and len(nulls):
        sim = kv.simulation
        moving = nulls[nulls["control"] == "moving null (simulated)"]
        if len(moving):
            hit = bool(moving["significant"].astype(bool).any())
            out.append(f"kv moving null (a judgment-level simulation, not a model: eviction turns "
                       f"{sim.turned:.0%} of refusals into compliance and each judge misreads {sim.misread:.0%} of "
                       f"replies, n = {int(moving['n_pairs'].max())} per member): "
                       + ("NOT rejected: a significant monitor difference (the study failed its control)"
                          if hit else "rejected: no significant monitor difference")
                       + f" although both judges' refusal rates drop ({_drops(moving)}).")
    return out


def _drops(g: pd.DataFrame) -> str:
    return "; ".join(f"{r.family_member}: drops {r.monitor_drop:+.2f} and {r.reference_drop:+.2f}, "
                     f"difference {r.difference:+.2f}, Holm p {r.holm_p:.3g}" for r in g.itertuples())


def calibration(p, cal: pd.DataFrame) -> list[str]:
    """The test's false-positive rate and power from the simulated runs."""
    if cal is None or cal.empty:
        return []
    r0 = cal.iloc[0]
    null, alt = cal[cal["kind"] == simulation.NULL], cal[cal["kind"] == "alternative"]
    nulls = ", ".join(f"{r.rejection_rate:.1%} ({r.scenario})" for r in null.itertuples())
    power = ", ".join(f"{r.rejection_rate:.0%} at alpha, {r.rejection_rate_holm:.0%} at Holm's first step "
                      f"({r.scenario}: expected difference {r.difference:+.2f})" for r in alt.itertuples())
    worst = null["rejection_rate"].max() if len(null) else float("nan")
    verdict = "calibrated" if worst <= r0["alpha"] else "NOT calibrated"
    return [f"kv test calibration ({int(r0['reps'])} simulated runs of n = {int(r0['n'])} per scenario, "
            f"alpha {r0['alpha']}): false-positive rate {nulls}: {verdict}; power {power}."]


def human(table: pd.DataFrame | None) -> list[str]:
    """Human labels on the disagreement items, or a plain statement that there are none."""
    if table is None or table.empty:
        return ["kv human labels: none read back yet (fill `results/<run>/kv/annotation/sheet.csv` and run "
                "`make kv-humans RUN=<run>`); no human-vs-judge agreement is reported."]
    judges = table[~table["versus"].str.startswith("human:")]
    parts = [f"{r.versus} agrees with {r.rater} on {r.agreement:.1%} of {int(r.n)} (kappa {r.kappa:.2f})"
             for r in judges[judges["model"] == "(all)"].itertuples()]
    inter = table[table["versus"].str.startswith("human:") & (table["model"] == "(all)")]
    parts += [f"{r.rater} and {r.versus} agree on {r.agreement:.1%} of {int(r.n)} (kappa {r.kappa:.2f})"
              for r in inter.itertuples()]
    return ["kv human labels on the judges' disagreements (all models): " + "; ".join(parts) + "."]


def verdicts(p, tables: dict[str, pd.DataFrame]) -> list[str]:
    """Every verdict sentence of the study, from its tables."""
    conf = tables["confirmatory"]
    if conf.empty:
        return ["kv: no confirmatory test could run (no harmful prompt under the main condition)."]
    from . import family

    return (confirmatory(p, conf, len(family(p.studies["kv"]))) + controls(p, conf, tables.get("null_controls"))
            + calibration(p, tables.get("calibration")) + human(tables.get("human_agreement")))
