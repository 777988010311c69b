"""Judge dependence of the frames study's declared primary contrasts: each declared (judge, outcome, subset,
model) against the same outcome under every other judge of the run that emits it (refusal: the second judge;
harmful compliance: the learned harm judge), on the replies both judges score. Both GEE estimates (from
``confirmatory.csv``: the declared judge's row is Holm-corrected, the other judge's is exploratory and
uncorrected), the paired per-item difference of the contrast (``judge_dependence`` module; Holm over the rows
of this table) and the judges' Cohen's kappa with an item-cluster bootstrap interval. "judge-dependent" = the
paired difference is significant after Holm, or the two judges' contrasts are significant in opposite
directions (DEFINITIONS.md "Judge dependence")."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import divergence, stats
from ...judge_dependence import kappa_interval
from .confirmatory import _subset
from .params import NAME, declared_family, pair_families, primary_of


def _item_contrasts(g: pd.DataFrame, pair) -> pd.Series:
    c = stats.frame_contrasts(g, "item_id", "frame", "paraphrase", "y", [pair], by=["model"])
    return c.set_index(["model", "item_id"])["delta"]


def table(p, d: pd.DataFrame, confirmatory: pd.DataFrame, judges_in_run: dict[str, str]) -> pd.DataFrame:
    """One row per declared (judge, outcome, subset, model), null-control rows included, and other judge of the
    same outcome; Holm over the paired differences within the declared family and within the null control."""
    fr, s = p.studies[NAME], p.stats
    fam = pair_families(fr, judges_in_run)
    fam = fam.assign(family=np.where(fam["null"], "null control", "confirmatory"))
    data = d.dropna(subset=["y"])
    rows = []
    for (judge, outcome, subset), keys in fam.groupby(["judge", "outcome", "subset"], sort=True):
        k = primary_of(fr, outcome)
        pair = tuple(k.split("-"))
        same = _subset(data[data["outcome"] == outcome], subset)
        for other in sorted(set(same["judge"]) - {judge}):
            wide = same[same["judge"].isin([judge, other])].pivot_table(
                index=["generation_id", "model", "item_id", "frame", "paraphrase", "cluster"], columns="judge",
                values="y").dropna().reset_index()
            if not len(wide):
                continue
            for model, family in zip(keys["model"], keys["family"]):
                w = wide[wide["model"] == model]
                row = {"judge": judge, "other_judge": other, "outcome": outcome, "subset": subset, "model": model,
                       "primary": k, "family": family, "n_replies": len(w)}
                if w["item_id"].nunique() < 3 or w[judge].nunique() < 2 and w[other].nunique() < 2:
                    rows.append({**row, "status": "not tested: fewer than 3 items or both judges constant"})
                    continue
                a = _item_contrasts(w.rename(columns={judge: "y"}), pair)
                b = _item_contrasts(w.rename(columns={other: "y"}), pair)
                both = pd.concat([a.rename("a"), b.rename("b")], axis=1).dropna().reset_index()
                both = both.merge(w.drop_duplicates("item_id")[["item_id", "cluster"]], on="item_id")
                diff = divergence.paired_difference(both["a"], both["b"], both["cluster"].to_numpy(), s.alpha)
                kap = kappa_interval(w[judge].astype(bool), w[other].astype(bool), w["cluster"], s.n_bootstrap, p.seed,
                                     s.alpha)
                rows.append({**row, "n_items": len(both), "delta": float(both["a"].mean()),
                             "other_delta": float(both["b"].mean()), "difference": float(diff.difference),
                             "difference_lo": float(diff.lo), "difference_hi": float(diff.hi),
                             "difference_p": float(diff.p), "kappa": kap[0], "kappa_lo": kap[1], "kappa_hi": kap[2],
                             "status": "ok"})
    t = pd.DataFrame(rows)
    if not len(t):
        return pd.DataFrame([{"note": "no second judge of a declared outcome"}])
    keys = ["judge", "outcome", "subset", "model"]
    prim = confirmatory.rename(columns={"contrast": "primary"})
    main = prim[[*keys, "primary", "estimate", "ci_lo", "ci_hi", "p_holm", "scale"]]
    other = prim[[*keys, "primary", "estimate", "ci_lo", "ci_hi", "p"]].rename(
        columns={"judge": "other_judge", "estimate": "other_estimate", "ci_lo": "other_ci_lo", "ci_hi": "other_ci_hi",
                 "p": "other_p"})
    t = t.merge(main, on=[*keys, "primary"], how="left").merge(other, on=["other_judge", "outcome", "subset", "model",
                                                                          "primary"], how="left")
    t["difference_p_holm"] = np.nan
    for _, g in t.groupby("family"):   # the null control's rows are their own family
        if "difference_p" in g:
            t.loc[g.index, "difference_p_holm"] = stats.holm_family(g["difference_p"].to_numpy(dtype=float))
    return dependence(t, t["estimate"], t["other_estimate"], s.alpha)


def dependence(t: pd.DataFrame, effect, other_effect, alpha: float) -> pd.DataFrame:
    """Under which judge each row's test is significant (``p_holm`` declared judge, ``other_p`` other judge) and
    whether it is judge-dependent: its paired difference beyond ``alpha`` after Holm, or significant under both
    judges with ``effect`` and ``other_effect`` of opposite signs."""
    sig_a, sig_b = t["p_holm"] < alpha, t["other_p"] < alpha
    opposite = sig_a & sig_b & (np.sign(effect) * np.sign(other_effect) < 0)
    t["significant_under"] = np.select([sig_a & sig_b, sig_a, sig_b], ["both", "declared judge only", "other judge only"],
                                       "neither")
    t["judge_dependent"] = (t["difference_p_holm"] < alpha) | opposite
    return t


def words(r) -> str:
    """One judge-dependence row in a sentence."""
    head = (f"{r['model']}, {r['outcome']} ({r['subset']} items), primary {r['primary']} under {r['judge']} and "
            f"{r['other_judge']}: ")
    if r.get("status") != "ok":
        return head + f"{r.get('status')}."
    return (head + f"{_verdict(r)}: Delta {100 * r['delta']:+.1f} vs {100 * r['other_delta']:+.1f} points "
            f"{_paired(r)}; GEE {r['estimate']:+.2f} (Holm p {r['p_holm']:.3g}) vs "
            f"{r['other_estimate']:+.2f} (p {r['other_p']:.3g}, uncorrected); {_agreement(r)}")


def _verdict(r) -> str:
    return "JUDGE-DEPENDENT" if bool(r["judge_dependent"]) else "not judge-dependent"


def _paired(r) -> str:
    """The paired difference of the two judges' estimates, in points, with its interval and Holm p."""
    return (f"(paired difference {100 * r['difference']:+.1f} [{100 * r['difference_lo']:+.1f}, "
            f"{100 * r['difference_hi']:+.1f}], Holm p {r['difference_p_holm']:.3g})")


def _agreement(r) -> str:
    """Under which judge the test is significant, and the two judges' kappa on the replies."""
    return (f"significant under {r['significant_under']}; kappa {r['kappa']:.2f} [{r['kappa_lo']:.2f}, "
            f"{r['kappa_hi']:.2f}] on {int(r['n_replies'])} replies.")


# --- the cross-model interaction under both judges ------------------------------------------------------------
INTERACTIONS = ("frame x model vs ", "H3: ")


def _models_of(fr, model: str, contrast: str) -> tuple[str, str]:
    """(reference, other) of a declared interaction test: the instruct model against ``interaction_reference``,
    or (H3) the base model against its instruct model (``model``)."""
    if contrast.startswith(INTERACTIONS[0]):
        return fr.interaction_reference, model
    base = next(b for b, i in fr.base_of.items() if i == model and f"base {b} vs" in contrast)
    return model, base


def interaction_table(p, d: pd.DataFrame, confirmatory: pd.DataFrame, judges_in_run: dict[str, str]) -> pd.DataFrame:
    """Each declared cross-model interaction (frame x model against the reference, H3) read again under every
    other judge of its outcome, on the replies both judges score: both joint Wald tests (``confirmatory.csv``: the
    declared judge's Holm-corrected, the other's exploratory and uncorrected); the interaction on the outcome's
    declared primary pair, per item the other model's contrast minus the reference's, under each judge (its
    mean, signed); their paired per-item difference (cluster t test, Holm over this table's rows) and the judges'
    Cohen's kappa on both models' replies. "judge-dependent" = the paired difference is significant after Holm,
    or both judges' interactions are significant with primary-pair interactions of opposite signs."""
    fr, s = p.studies[NAME], p.stats
    fam = declared_family(fr, judges_in_run)
    fam = fam[fam["contrast"].str.startswith(INTERACTIONS)]
    if not len(fam):
        return pd.DataFrame([{"note": "no cross-model interaction declared (frames.interaction_reference, frames.base_of)"}])
    data = d.dropna(subset=["y"])
    rows = []
    for judge, outcome, subset, model, contrast in fam[["judge", "outcome", "subset", "model", "contrast"]].itertuples(
            index=False):
        ref, other = _models_of(fr, model, contrast)
        k = primary_of(fr, outcome)
        pair = tuple(k.split("-"))
        same = _subset(data[(data["outcome"] == outcome) & data["model"].isin([ref, other])], subset)
        for oj in sorted(set(same["judge"]) - {judge}):
            w = same[same["judge"].isin([judge, oj])].pivot_table(
                index=["generation_id", "model", "item_id", "frame", "paraphrase", "cluster"], columns="judge",
                values="y").dropna().reset_index()
            row = {"judge": judge, "other_judge": oj, "outcome": outcome, "subset": subset, "model": model,
                   "contrast": contrast, "reference_model": ref, "compared_model": other, "primary": k,
                   "n_replies": len(w)}
            if not len(w) or w["model"].nunique() < 2 or w["item_id"].nunique() < 3:
                rows.append({**row, "status": "not tested: fewer than 3 items or a model without replies both judge"})
                continue
            per = {}
            for name, col in (("a", judge), ("b", oj)):
                c = _item_contrasts(w.rename(columns={col: "y"}), pair).unstack("model")
                per[name] = (c[other] - c[ref]).rename(name) if {ref, other} <= set(c) else pd.Series(dtype=float)
            both = pd.concat([per["a"], per["b"]], axis=1).dropna().reset_index()
            both = both.merge(w.drop_duplicates("item_id")[["item_id", "cluster"]], on="item_id")
            if len(both) < 3:
                rows.append({**row, "status": "not tested: fewer than 3 items with both models' contrasts"})
                continue
            diff = divergence.paired_difference(both["a"], both["b"], both["cluster"].to_numpy(), s.alpha)
            kap = kappa_interval(w[judge].astype(bool), w[oj].astype(bool), w["cluster"], s.n_bootstrap, p.seed, s.alpha)
            rows.append({**row, "n_items": len(both), "interaction_delta": float(both["a"].mean()),
                         "other_interaction_delta": float(both["b"].mean()), "difference": float(diff.difference),
                         "difference_lo": float(diff.lo), "difference_hi": float(diff.hi), "difference_p": float(diff.p),
                         "kappa": kap[0], "kappa_lo": kap[1], "kappa_hi": kap[2], "status": "ok"})
    t = pd.DataFrame(rows)
    if not len(t):
        return pd.DataFrame([{"note": "no other judge of a declared interaction's outcome"}])
    keys = ["judge", "outcome", "subset", "model", "contrast"]
    main = confirmatory[[*keys, "stat", "dist", "p", "p_holm"]]
    other = confirmatory[[*keys, "stat", "p"]].rename(columns={"judge": "other_judge", "stat": "other_stat",
                                                                "p": "other_p"})
    t = t.merge(main, on=keys, how="left").merge(other, on=["other_judge", *keys[1:]], how="left")
    t["difference_p_holm"] = stats.holm_family(t["difference_p"].to_numpy(dtype=float)) if "difference_p" in t else np.nan
    delta_a = t["interaction_delta"] if "interaction_delta" in t else np.nan
    delta_b = t["other_interaction_delta"] if "other_interaction_delta" in t else np.nan
    t = dependence(t, delta_a, delta_b, s.alpha)
    # the rule the paired test replaces (DEFINITIONS.md)
    t["significant_under_exactly_one"] = (t["p_holm"] < s.alpha) ^ (t["other_p"] < s.alpha)
    return t


def interaction_words(r) -> str:
    """One cross-model interaction under two judges in a sentence."""
    head = (f"{r['compared_model']} against {r['reference_model']} ({r['contrast']}), {r['outcome']} ({r['subset']} "
            f"items) under {r['judge']} and {r['other_judge']}: ")
    if r.get("status") != "ok":
        return head + f"{r.get('status')}."
    return (head + f"{_verdict(r)}: interaction on {r['primary']} {100 * r['interaction_delta']:+.1f} vs "
            f"{100 * r['other_interaction_delta']:+.1f} points {_paired(r)}; "
            f"Wald p {r['p_holm']:.3g} (Holm) vs {r['other_p']:.3g} (uncorrected); {_agreement(r)}")
