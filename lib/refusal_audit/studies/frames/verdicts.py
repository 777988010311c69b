"""The frames study's answer in words: one sentence per significant or failed test, the flags that qualify
the rows (an uninformative familiarity stratum, harm judges that disagree), and the estimate, false-positive rate and
power cells the verdict rows share."""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats as st

from ...paths import ROOT
from .confirmatory import verdicts as sentences
from .control import ADAPTER
from .judging import interaction_words
from .judging import words as judge_words
from .params import NAME, NULL
from .readings import words as reading_words
from .shapes import power_at, worst_size


def verdicts(p, tables: dict[str, pd.DataFrame]) -> list[str]:
    """The study's answer in words (report.html opens with it): a count of the confirmatory family's
    significant tests, one sentence per declared primary contrast with its item-level readings
    (``readings.words``), then one sentence per significant, untestable or beyond-noise test
    (``confirmatory.verdicts``) and one line for the rest (notebook 05 says every test in words)."""

    conf, alpha = tables["confirmatory"], p.stats.alpha
    fam = conf[conf["family"].str.startswith("confirmatory")]
    null = conf[conf["family"].str.startswith("null control")]
    head = [f"frames: {int((fam['p_holm'] < alpha).sum())} of {len(fam)} confirmatory tests significant after Holm "
            f"at alpha {alpha} ({int((fam['status'] != 'ok').sum())} not testable, counted as not rejected)."]
    if len(null):
        head.append(f"frames null control (one slot text in every frame): {int((null['p_holm'] < alpha).sum())} of "
                    f"{len(null)} tests significant after Holm: "
                    + ("not rejected (as expected)." if not (null["p_holm"] < alpha).any()
                       else "REJECTED: the pipeline's own noise reached significance."))
    mde = fam["mde_80_primary"].dropna() if "mde_80_primary" in fam else pd.Series(dtype=float)
    if len(mde) and not (fam["p_holm"] < alpha).all():
        head.append(f"What this run could have seen: its frame-pair tests had 80 % power (significant at Holm's "
                    f"strictest step; simulated at their own item count, decodes and rewording swing net of decode "
                    f"noise) only for frame effects of {mde.min():.2f} to {mde.max():.2f} ({100 * mde.min():.0f} to "
                    f"{100 * mde.max():.0f} points) or more; power at the seed's 11.8 points "
                    f"{fam['power_primary_118'].min():.2f} to {fam['power_primary_118'].max():.2f} "
                    f"(`mde_80_primary`, `power_primary_118` in stats/frames/confirmatory.csv).")
    head += [f"frames: {f}." for f in flags(p, tables).values() if f]
    item = tables.get("item_readings")
    if item is not None and len(item):   # each declared primary contrast's item-level readings (readings.py)
        head += [reading_words(r, alpha) for _, r in item[item["family"] == "confirmatory"].iterrows()]
    dep = tables.get("judge_dependence")
    if dep is not None and "status" in dep:   # each declared primary contrast under the other judge (judging.py)
        conf_rows = dep[dep["family"] == "confirmatory"] if "family" in dep else dep
        n_dep = int(conf_rows["judge_dependent"].fillna(False).astype(bool).sum()) if "judge_dependent" in dep else 0
        head.append(f"frames judge dependence: {n_dep} of {len(conf_rows)} declared primary contrasts judge-dependent "
                    "(paired difference under two judges significant after Holm, or significant in opposite directions); "
                    "the null control's rows follow them.")
        head += [judge_words(r) for _, r in dep.iterrows()]
    inter = tables.get("interaction_dependence")
    if inter is not None and "status" in inter:   # each declared cross-model interaction under the other judge
        n_dep = int(inter["judge_dependent"].fillna(False).astype(bool).sum()) if "judge_dependent" in inter else 0
        head.append(f"frames judge dependence of the cross-model interactions: {n_dep} of {len(inter)} judge-dependent "
                    "(stats/frames/interaction_dependence.csv).")
        head += [interaction_words(r) for _, r in inter.iterrows()]
    head += secondary_words(tables)
    sem = tables.get("semantic_divergence")
    if sem is not None and "difference" in sem:   # a secondary outcome, apart from the verdict (secondary.py)
        head.append(f"frames secondary, semantic response divergence (greedy replies' cosine distance across frames "
                    f"minus across paraphrases, {sem['encoder'].iloc[0]}; uncorrected, descriptive): " + "; ".join(
                        f"{r.model} {r.contrast} {r.difference:+.3f} [{r.ci_lo:+.3f}, {r.ci_hi:+.3f}]"
                        for r in sem.itertuples()) + " (stats/frames/semantic_divergence.csv, figure frames_semantic).")
    tested = pd.concat([fam, null])
    # a test beyond paraphrase noise but not significant is said too: the frame moved items, in no one direction
    beyond = tested["beyond_noise"].astype("boolean").fillna(False).astype(bool) if "beyond_noise" in tested else False
    said = tested[(tested["p_holm"] < alpha) | (tested["status"] != "ok") | beyond]
    rest = len(tested) - len(said)
    return head + sentences(said, alpha) + ([f"The other {rest} tests are neither significant after Holm nor beyond "
                                             "paraphrase noise (each in words in notebook 05, each a row of "
                                             "stats/frames/confirmatory.csv)."] if rest else [])


def secondary_words(tables: dict[str, pd.DataFrame]) -> list[str]:
    """The params-named LLM routes' results, each apart from the verdict: the LLM equivalence score and the
    declared primary contrasts re-fitted on its strict (= 5) subset; the ordinal rubric's divergence."""
    out = []
    eq = tables.get("equivalence_llm")
    if eq is not None and "equivalence_llm" in eq:
        counts = eq["equivalence_llm"].value_counts().sort_index()
        scores = ", ".join(f"{int(k)}: {int(v)}" for k, v in counts.items()) or "none"
        out.append(f"frames LLM equivalence score ({eq['scorer'].iloc[0]}, the two requests only, wrapper and template "
                   f"masked): {len(eq)} items scored ({scores}; {int(eq['equivalence_llm'].isna().sum())} unparseable); "
                   f"the strict (= 5) subset {int(eq['strict'].sum())} items (stats/frames/equivalence_llm.csv).")
    strict = tables.get("equivalence_llm_strict")
    if strict is not None and "estimate" in strict:
        out += [f"  strict subset ({int(r.n_kept)} items, re-fitted apart; Holm over the re-fitted family), {r.model} "
                f"{r.outcome} ({r.subset} items) {r.contrast}: " + (
                    f"{r.scale} {r.estimate:+.2f} [{r.ci_lo:+.2f}, {r.ci_hi:+.2f}], Delta {100 * r.delta:+.1f} points, "
                    f"p {r.p:.3g}, Holm p {r.p_holm:.3g}" if r.status == "ok" else f"not tested ({r.status})")
                for r in strict.itertuples()]
    elif strict is not None and "note" in strict:
        out.append(f"  strict subset: {strict['note'].iloc[0]}.")
    rub = tables.get("rubric_divergence")
    if rub is not None and "model" in rub:
        cells = [f"{r.model} {r.contrast} {r.difference:+.2f} [{r.ci_lo:+.2f}, {r.ci_hi:+.2f}] over {int(r.n_items)} items"
                 if pd.notna(getattr(r, "difference", np.nan)) else f"{r.model} {r.contrast}: {r.note}"
                 for r in rub.itertuples()]
        out.append(f"frames secondary, ordinal LLM rubric ({rub['scorer'].iloc[0]}, greedy reply pairs scored 1-5 for how "
                   "alike they are, on the stratified subsample; mean score across paraphrases minus across frames, "
                   "uncorrected, descriptive): " + "; ".join(cells) + " (stats/frames/rubric_divergence.csv).")
    return out


# --- flags: an uninformative familiarity stratum, judges that disagree ----------------------------------------
def flags(p, tables: dict[str, pd.DataFrame]) -> dict[str, str]:
    """``familiarity``: said when a model's familiar items are no more than the familiarity null gives by
    chance (the 95th percentile of Binomial(items, 1 - familiarity_quantile)); ``harm_judges``: said when the
    outcome judge and the learned harm judge agree at Cohen's kappa below ``frames.kappa_floor`` (on replies to
    harmful requests). Empty strings when there is nothing to say."""

    fr, out = p.studies[NAME], {"familiarity": "", "harm_judges": ""}
    share = tables.get("familiarity_share")
    if share is not None and len(share) and "n_familiar" in share:
        chance = st.binom.ppf(0.95, share["n_items"], 1 - fr.familiarity_quantile)
        empty = share[(share["n_familiar"] <= chance) & ~share["model"].str.endswith(NULL)]
        if len(empty):
            out["familiarity"] = (
                "familiarity stratum near-empty: " + ", ".join(f"{r.model} {int(r.n_familiar)} of {int(r.n_items)}"
                                                               for r in empty.itertuples())
                + f" items familiar, no more than chance under the familiarity null (<= {int(chance.max())}); the "
                "low-familiarity repeat is then nearly all items and says nothing about familiarity")
    agree = tables.get("judge_agreement")
    if agree is not None and "kappa" in agree and "on" in agree:
        h = agree[(agree["outcome"] == "harmful_compliance") & (agree["on"] == "replies to harmful requests")]
        low = h[h["kappa"] < fr.kappa_floor]
        if len(low):
            r = low.iloc[0]
            out["harm_judges"] = (f"harm judges disagree: {r['judge_a']} vs {r['judge_b']} kappa {r['kappa']:.2f} "
                                  f"< floor {fr.kappa_floor:.2f} (replies to harmful requests, n {int(r['n'])})")
    return out


# --- the cells the verdict rows share ----------------------------------------------------------------------
def control_model(p) -> str:
    """The positive control among frames.models (the model whose adapter is ``control.ADAPTER``), or ""."""

    for m in p.studies[NAME].models:
        a = p.models[m].adapter
        if a and (ROOT / a).resolve() == ADAPTER.resolve():
            return m
    return ""


def estimate_cell(r) -> str:
    return (f"{r['contrast']} {r['estimate']:+.2f} [{r['ci_lo']:+.2f}, {r['ci_hi']:+.2f}] ({r['scale']}; Delta "
            f"{100 * r['delta']:+.1f} points), Holm p {r['p_holm']:.3g}; mean-square noise margin "
            f"{r['noise_margin']:+.3f} [{r['noise_lo']:+.3f}, {r['noise_hi']:+.3f}]"
            f"{' beyond' if bool(r['beyond_noise']) else ' not beyond'} paraphrase noise")


def fpr_cell(rows: pd.DataFrame, shapes) -> str:
    n, worst = int(rows["n_items"].max()), float(rows["fpr_primary"].max())
    text = (f"{100 * worst:.1f} % +- {100 * np.sqrt(worst * (1 - worst) / 300):.1f} (Monte Carlo SE; primary contrast: "
            f"t-test stand-in for the GEE at frame effect 0, the worst of 10 swing SDs of 300 draws each, {n} items, "
            f"at Holm's strictest step alpha / {int(rows['family_size'].max())})")
    if shapes is not None:
        size, cells, reps = worst_size(shapes)
        text += f"; noise comparison {100 * size:.1f} % (worst of {cells} null boundary shapes, {reps} draws, benchmark)"
    return text


PAPER_ITEMS = {"all": 480, "non_harmful": 180}   # the paper roster's items per subset (benchmarks/frames_shapes.py)


def power_cell(r, shapes, positive: bool) -> str:
    here = (f"power {r['power_primary_118']:.2f} at 11.8 points, {r['power_primary_036']:.2f} at 3.6, "
            f"{r['power_primary_200']:.2f} at 20 ({int(r['n_items'])} items, rewording swing {r['rms_swing_net']:.2f} RMS "
            f"net of decode noise)")
    if shapes is not None:
        n = PAPER_ITEMS.get(r["subset"], 480)
        paper = [power_at(shapes, n, r["rms_swing_net"], e) for e in (0.118, 0.036, 0.2)]
        here += f"; paper size {n} x 7: {paper[0]:.2f} / {paper[1]:.2f} / {paper[2]:.2f} (benchmark, uniform shape)"
    if positive:
        return here
    mde = r["mde_80_primary"]
    head = f"MDE {'above 0.80' if pd.isna(mde) else f'+{mde:.2f}'} (80 % power)"
    return f"{head}; {here}"
