"""The confusion study's answer in words: the gate's verdict, one sentence per arm (model, judge) with
its null, the same-meaning rule's measured error and the controls, each from the statistics tables."""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import analysis, arm_verdict, controls
from . import defenses as D
from . import wording as W
from .params import NAME, testbed


def gate_verdict(gates, drops: pd.DataFrame | None, accuracy: pd.DataFrame | None) -> list[str]:
    """The gate in words: what each class was held to and why (validated accuracy against the floor),
    the paraphrases dropped per rule, and the share of gated paraphrases whose label it may have got wrong."""
    if drops is None or accuracy is None or not len(drops):
        return []
    d = drops[drops["label"] == "all"].set_index("rule")
    n = int(d.loc["any", "n"])
    dropped = (f"of {n} paraphrases it dropped {d.loc['cosine', 'dropped']} for cosine < tau {gates.tau:g}, "
               f"{d.loc['jaccard', 'dropped']} for Jaccard distance < delta {gates.delta:g}, "
               f"{d.loc['safety', 'dropped']} for the safety side, {d.loc['near_duplicate', 'dropped']} as "
               f"near-duplicates ({d.loc['any', 'dropped']} excluded in all; {d.loc['cluster', 'dropped']} of "
               f"{d.loc['cluster', 'n']} clusters excluded whole)")
    if not gates.safety:
        return [f"confusion gate: the safety gate is off; {dropped}."]
    w = accuracy[accuracy["held_out"] == "worst"].set_index("class")
    sets = accuracy[accuracy["held_out"] != "worst"]
    held = []
    for c, r in w.iterrows():
        low = sets[(sets["class"] == c)].sort_values("accuracy")["held_out"].iloc[0]
        cmp = ">=" if r["accuracy"] >= r["floor"] else "<"
        to = "its intended label" if r["gate"] == "label" else "its seed's read"
        why = "" if gates.safety_against == "seed" else (f" (validated accuracy {r['accuracy']:.2f} on {low} "
                                                          f"{cmp} floor {r['floor']:.2f})")
        held.append(f"{c} clusters to {to}{why}")
    admitted = w["n_admitted"].sum()
    wrong = w["expected_wrong"].sum()
    share = (f"of the {int(admitted)} paraphrases it admitted, an estimated {wrong:.0f} ({wrong / admitted:.0%}) "
             f"may carry a label it got wrong (validated label error "
             + ", ".join(f"{r['label_error']:.2f} held to {c}" for c, r in w.iterrows()) + f"), and "
             f"{int(w['n_against_label'].sum())} were admitted on the side opposite their intended label (held to a "
             "seed the ensemble misreads)") if admitted else "it admitted no paraphrase"
    return [f"confusion gate: the safety ensemble held {' and '.join(held)}; {dropped}; {share}."]


def verdicts(p, tables: dict[str, pd.DataFrame]) -> list[str]:
    """The study's answer in words (notebook 05 ends with it, report.html opens with it): per model and
    judge, FRR and Confusion Rate with their CIs and the events from other clusters; how many pairs of arms
    the two order differently; whether the planted control's known answers were recovered at both scopes,
    and the scope and harmful-twin controls' (``controls.controls``); the gate first."""
    out = gate_verdict(p.studies[NAME].gates, tables.get("gate_drops"), tables.get("gate_accuracy"))
    v = tables.get("frr_vs_cr")
    if v is not None and len(v):
        for r in v.itertuples():
            tag = " (TESTBED)" if testbed(p, r.model) else ""
            cr = (f"{r.confusion_rate:.2f} [{r.confusion_rate_lo:.2f}, {r.confusion_rate_hi:.2f}]"
                  if pd.notna(r.confusion_rate) else "not defined (no rejection)")
            extra = ""
            if "n_cross_confused" in v:
                extra = (f" {int(r.n_cross_confused)} of {int(r.n_rejected)} rejections have an event from another "
                         f"cluster ({int(r.n_cross_events)} such events{_known_words(r)}); the label rule removed "
                         f"{int(r.n_events_removed)} cross-label events; {int(r.n_uncovered)} N_k pairs lacked signals.")
            every = (_cross_all(tables.get("clusters"), r.model, r.judge) + _harmful_words(r)
                     + _uncovered_words(tables.get("clusters"), r.model, r.judge))
            n = null_row(tables.get("nulls"), r.model, r.judge)
            out.append(f"confusion, {r.model}{tag}, {r.judge}: "
                       + (f"{analysis.null_answer(n)}. " if n is not None else "")
                       + f"FRR {r.frr:.3f} [{r.frr_lo:.3f}, {r.frr_hi:.3f}], "
                       f"Confusion Rate {cr} over {r.n_clusters} {r.group} clusters ({r.clusters_mixed} mixed, "
                       f"{r.clusters_all_rejected} rejected whole)." + _null_words(n, r)
                       + (W.words_line(n) if n is not None else "") + " "
                       + _theta_words(p, tables.get("same_meaning_rule"))
                       + (arm_verdict.cosine_words(n) if n is not None else "") + extra + every)
    pairs = tables.get("arm_pairs")
    if pairs is not None and len(pairs):
        out.append(f"confusion: {int(pairs['disagree'].sum())} of {len(pairs)} pairs of model/judge arms are ordered "
                   "differently by FRR and by Confusion Rate; the Confusion Rate's own null differs between arms (a "
                   "refuser at chance sits near 1 whatever its FRR), so an ordering difference says which arm's "
                   "refusals follow intents, not which is more confused than chance.")
    if tables.get("defenses") is not None and len(tables["defenses"]):
        nulls = tables.get("nulls")
        if nulls is not None and "verdict" not in nulls:
            nulls = nulls.assign(verdict=[analysis.null_answer(r) for _, r in nulls.iterrows()])
        out += D.words(tables["defenses"], nulls)
    planted = tables.get("planted")
    if planted is not None and len(planted):
        ok = bool(planted["match"].all())
        out.append(f"confusion planted control (flip and consistent arms, corpus and cluster scope): "
                   f"{int(planted['match'].sum())} of {len(planted)} known answers recovered"
                   + ("." if ok else " (the study failed its control)."))
    ctl = tables.get("controls")
    if ctl is not None and len(ctl):
        out.append(controls_words(ctl))
    return out


def null_row(nulls: pd.DataFrame | None, model: str, judge: str):
    if nulls is None or not len(nulls):
        return None
    hit = nulls[(nulls["model"] == model) & (nulls["judge"] == judge)]
    return hit.iloc[0] if len(hit) else None


def _theta_words(p, rule: pd.DataFrame | None = None) -> str:
    """The same-meaning rule's choice and its measured error (``meaning.py``), in every confusion verdict."""
    theta = p.studies[NAME].gates.tau
    head = (f"Same meaning across clusters: same label and, where the pair of clusters carries a known label (hand "
            f"labelled twin or look-alike), that label, else cosine > theta = {theta:g} (the gate's tau)")
    if rule is None or not len(rule):
        return head + "; its precision and recall on labelled pairs: not computed (no same_meaning_rule table)."
    r = rule[(rule["group"] == "all") & rule["run_theta"].astype(bool)].iloc[0]
    return (head + f"; on {int(r['n_pairs'])} hand-labelled cross-cluster pairs of cosine >= 0.60 it has precision "
            f"{r['precision']:.2f} [{r['precision_lo']:.2f}, {r['precision_hi']:.2f}] and recall {r['recall']:.2f} "
            f"[{r['recall_lo']:.2f}, {r['recall_hi']:.2f}] (Wilson): a cross-cluster event the cosine decides is a "
            f"same-intent pair about {r['precision']:.0%} of the time.")


def _null_words(n, r) -> str:
    """CR and CI beside their random-placement nulls, the same-meaning CI, the share of N_k below theta, and the
    verdict test's simulated false-positive rate, power and smallest detectable effect."""
    if n is None:
        return ""
    if not n["n_rejected"]:
        return " No benign rejection: no null to place."
    if n["n_rejected"] >= n["n_prompts"]:
        return " Every benign prompt rejected: no other placement of its rejections exists, so no null to compare with."
    w = f" Wilson [{r.confusion_rate_w_lo:.2f}, {r.confusion_rate_w_hi:.2f}];" if hasattr(r, "confusion_rate_w_lo") else ""
    out = (f" CR {n['confusion_rate']:.2f} ({int(n['n_rejected'])} rejections;{w} cluster bootstrap above) against "
           f"{n['confusion_rate_null']:.2f} [{n['confusion_rate_null_lo']:.2f}, {n['confusion_rate_null_hi']:.2f}] "
           f"for the same rejections placed at random within each source set ({int(n['n_perm'])} placements; "
           f"p(below) {n['confusion_rate_p_below']:.3f}). "
           + (f"CI {n['ci']:.3f} against {n['ci_null']:.3f} [{n['ci_null_lo']:.3f}, {n['ci_null_hi']:.3f}] (p(above) "
              f"{n['ci_p_above']:.3f}); CI over same-meaning neighbours only {n['ci_events']:.3f}; "
              if pd.notna(n["ci"]) else "CI not available (no token signals: decisions only); ")
           + f"{n['n_nk_below_theta']} of {n['n_nk_pairs']} N_k pairs ({n['nk_below_theta']:.0%}) are other intents "
           "below theta.")
    if "fpr" in n and pd.notna(n["fpr"]):
        mde = (f"smallest CR drop detected in 80 % of draws {n['mde']:.2f}" if pd.notna(n["mde"])
               else "no planted drop detected in 80 % of draws")
        out += (f" The test (CR below its null at alpha {n['alpha']:g}{_wording_rule(n)}) calls {n['fpr']:.1%} of null "
                f"draws ({_null_scenarios(n)}), {n['power_at_half']:.2f} of {int(n['n_draws'])} draws with half the "
                f"rejections in whole clusters (CR drop {n['effect_at_half']:.2f}); {mde}.")
        if pd.notna(n.get("fpr_trigger", np.nan)):
            out += (f" Trigger-word guards (random lists of harm-lexicon words; {int(n['n_trigger_guards'])} reject a "
                    f"benign prompt): called \"follows intents\" in at most {n['fpr_trigger']:.1%} per list size, "
                    f"{n['fpr_trigger_random_only']:.1%} by the random placement alone.")
    return out


def _wording_rule(n) -> str:
    return " and below the same rejections placed among prompts of the same harm words" if pd.notna(
        n.get("wording_p_below", np.nan)) else ""


def _null_scenarios(n) -> str:
    """Which null scenarios the false-positive rate is the worst of."""
    trig = (f" and {int(n['n_trigger_guards'])} trigger-word guards" if pd.notna(n.get("n_trigger_guards", np.nan))
            else "")
    return f"worst of 2 null scenarios, {int(n['n_null_draws'])} draws each{trig}"


def _uncovered_words(clusters: pd.DataFrame | None, model: str, judge: str) -> str:
    """Missing signals per label group: the rejections whose CI is undefined and the N_k pairs without signals."""
    if clusters is None or "n_uncovered" not in clusters:
        return ""
    a = clusters[(clusters["model"] == model) & (clusters["judge"] == judge)]
    parts = [f"{g}: {int(x['n_rejected'].sum()) - int(x['n_ci'].sum())} of {int(x['n_rejected'].sum())} rejections "
             f"without a CI, {int(x['n_uncovered'].sum())} N_k pairs without signals"
             for g, x in a.groupby("label", sort=True)]
    return " Missing signals, " + "; ".join(parts) + "." if parts else ""


def _harmful_words(r) -> str:
    """The harmful clusters apart from the FRR: correct refusals and harmful acceptances (the other error)."""
    n = getattr(r, "n_harmful", 0)
    if not n or pd.isna(n):
        return ""
    return (f" Harmful prompts, apart from the FRR: {int(r.n_harmful_refused)} of {int(n)} refused (correct refusals), "
            f"{int(r.n_harmful_accepted)} accepted (harmful acceptances, the other error: "
            f"{r.harmful_acceptance_rate:.2f} [{r.harmful_acceptance_rate_lo:.2f}, {r.harmful_acceptance_rate_hi:.2f}], "
            "Wilson).")


def _known_words(r) -> str:
    """The events from other clusters split by the known labels (DEFINITIONS.md, "Known labels")."""
    if pd.isna(getattr(r, "n_known_events", np.nan)):
        return ""
    twins = int(r.n_known_events)
    return (f": {twins} with a known same-intent twin ({int(r.n_known_confused)} rejections), "
            f"{int(r.n_cross_events) - twins} between clusters without a label (cosine > theta), 0 with a known "
            f"different-intent look-alike, whose {int(r.n_known_removed)} accepted prompts above theta the known "
            "labels kept out")


def _cross_all(clusters: pd.DataFrame | None, model: str, judge: str) -> str:
    """Over every cluster of one arm (safe and unsafe): rejections with an event from another cluster and
    how many such events."""
    if clusters is None or "n_cross_events" not in clusters:
        return ""
    a = clusters[(clusters["model"] == model) & (clusters["judge"] == judge)]
    return (f" Over all {len(a)} clusters: {int(a['n_cross_confused'].sum())} of {int(a['n_rejected'].sum())} "
            f"rejections have an event from another cluster ({int(a['n_cross_events'].sum())} such events of "
            f"{int(a['n_events'].sum())}).")


def controls_words(ctl: pd.DataFrame) -> str:
    """The scope and harmful-twin controls in one sentence."""
    known = controls.control_known(ctl)
    parts = []
    for name in controls.CONTROLS:
        t = ctl[ctl["control"] == name]
        if not len(t) or not bool(t["available"].iloc[0]):
            parts.append(f"{name}: not run (no pair of the kind above theta in this corpus)")
            continue
        v = t.set_index(["scope", "statistic"])

        def got(scope, stat, v=v):
            return int(v.loc[(scope, stat), "found"])
        what = (f"corpus scope finds {got('corpus', 'n_confused')} of {got('corpus', 'n_rejected')} rejections "
                f"confused by the other cluster, cluster scope {got('cluster', 'n_confused')}"
                if name == "cross_cluster" else
                f"{got('corpus', 'n_confused')} events for the {got('corpus', 'n_rejected')} refused harmful twins; "
                f"the label rule kept {got('corpus', 'n_events_removed')} cross-label pairs above theta out")
        ok = bool(t["match"].all()) and known[name]
        parts.append(f"{name} ({t['rejected_cluster'].iloc[0]} rejected, {t['accepted_cluster'].iloc[0]} accepted, "
                     f"cosine {t['pair_cosine'].iloc[0]:.3f}): {what}; "
                     + ("known answer recovered" if ok else "KNOWN ANSWER NOT RECOVERED (the study failed its control)"))
    return "confusion controls: " + "; ".join(parts) + "."
