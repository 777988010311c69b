"""The frames study's statistics, every one of them from ``refusal_audit.stats``.

Y: one binary indicator per outcome class of the 4-class judge (unparseable replies have none), and
the second judge's refusal (judge sensitivity). For each judge, model, outcome and frame pair:
the per-item Delta (``stats.frame_contrasts``), its mean over items with an item-cluster bootstrap CI,
the paraphrase-noise band (``stats.paraphrase_noise_band``); the marginal logistic model
``y ~ frame + paraphrase + C~ + frame:C~`` by GEE with item clusters and Mancl-DeRouen SEs
(``stats.fit_gee_logit``), C~ the mean-centred Min-K% familiarity of the item to that model; model x
frame Wald tests on a pooled fit; Holm within each family; the contrasts again on the low-familiarity
items, on every difficulty tier, and on the items above each embedding-similarity threshold
(the equivalence audit, bodies compared with the frame wrapper masked).
"""
from __future__ import annotations

import warnings
from itertools import combinations

import numpy as np
import pandas as pd

from ... import judges, stats
from . import NAME, OUTCOMES

MAIN_JUDGE = "outcome"


def pairs_of(frames: list[str]) -> list[tuple[str, str]]:
    if set(frames) >= {"E", "D", "N"}:
        return [("E", "D"), ("E", "N"), ("D", "N")]
    return list(combinations(frames, 2))


def long_outcomes(generations: pd.DataFrame, judgments: pd.DataFrame) -> pd.DataFrame:
    """One row per generation, judge and outcome: ``y`` in {0, 1}, NaN when the judge cannot say."""
    keep = ["generation_id", "model", "item_id", "role", "frame", "paraphrase", "temperature", "seed", "tier",
            "familiarity"]
    g = generations[keep].rename(columns={"role": "stratum"})
    parts = []
    for name, j in judgments.groupby("judge"):
        if j["kind"].iloc[0] == "outcome":
            for o in OUTCOMES:
                y = (j["label"] == o).astype(float).mask(j["label"] == "unparseable")
                parts.append(pd.DataFrame({"generation_id": j["generation_id"], "judge": name, "outcome": o, "y": y}))
        elif j["kind"].iloc[0] == "refusal":
            y = judges.refused(j).astype("Float64").astype(float)
            parts.append(pd.DataFrame({"generation_id": j["generation_id"], "judge": name, "outcome": "refusal", "y": y}))
    return pd.concat(parts, ignore_index=True).merge(g, on="generation_id")


def contrasts(d: pd.DataFrame, pairs, n_boot: int, seed: int, alpha: float, subset: str = "all") -> tuple:
    """Per-item Delta and its mean over items with a cluster-bootstrap CI, per judge, outcome, model, pair."""
    item_rows, rows = [], []
    for (judge, outcome), g in d.groupby(["judge", "outcome"], sort=True):
        if g["y"].notna().sum() == 0:
            continue
        per_item = stats.frame_contrasts(g, "item_id", "frame", "paraphrase", "y", pairs, by=["model"])
        per_item = per_item.assign(judge=judge, outcome=outcome, subset=subset)
        item_rows.append(per_item)
        for (model, f1, f2), c in per_item.dropna(subset=["delta"]).groupby(["model", "f1", "f2"], sort=False):
            if len(c) >= 2:
                mean, lo, hi = stats.cluster_bootstrap_mean(c, "item_id", "delta", n_boot, seed, alpha)
            else:
                mean, lo, hi = float(c["delta"].mean()), np.nan, np.nan
            rows.append({"subset": subset, "judge": judge, "outcome": outcome, "model": model, "f1": f1, "f2": f2,
                         "contrast": f"{f1}-{f2}", "n_items": len(c), "delta": mean, "ci_lo": lo, "ci_hi": hi})
    return (pd.concat(item_rows, ignore_index=True) if item_rows else pd.DataFrame(),
            pd.DataFrame(rows))


def noise_band(d: pd.DataFrame, q: float) -> pd.DataFrame:
    out = []
    for (judge, outcome), g in d.groupby(["judge", "outcome"], sort=True):
        band = stats.paraphrase_noise_band(g, "item_id", "frame", "paraphrase", "y", by=["model"], q=q)
        out.append(band.assign(judge=judge, outcome=outcome))
    return pd.concat(out, ignore_index=True)[["judge", "outcome", "model", "n_cells", "mean_gap", "q_gap", "q"]]


# (quasi-)separation: a logit SE above SEPARATION_SE or a coefficient beyond +/- SEPARATION_EST (a cell
# with no events); the fit is then reported as failed, with the reason, not used
SEPARATION_SE = 50.0
SEPARATION_EST = 15.0
FORMULA = "y ~ C(frame, Treatment('{ref}')) + C(paraphrase) + c + C(frame, Treatment('{ref}')):c"


def gee(d: pd.DataFrame, ref: str, alpha: float) -> pd.DataFrame:
    """Per judge, model and outcome: the frame terms (and their interaction with C~) of the GEE fit;
    a cell whose outcome never varies, or whose fit fails (separation), gets a row saying so."""
    rows = []
    for (judge, outcome, model), g in d.dropna(subset=["y"]).groupby(["judge", "outcome", "model"], sort=True):
        base = {"judge": judge, "outcome": outcome, "model": model}
        if g["y"].nunique() < 2 or g["item_id"].nunique() < 3:
            rows.append({**base, "term": "", "note": "outcome constant or fewer than 3 items: no fit"})
            continue
        g = g.assign(c=stats.mean_centre(g, "familiarity", cluster="item_id"))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = stats.fit_gee_logit(g, FORMULA.format(ref=ref), cluster="item_id")
                t = stats.gee_table(res, alpha)
            if (not np.isfinite(t["se"]).all() or (t["se"] > SEPARATION_SE).any()
                    or (t["estimate"].abs() > SEPARATION_EST).any()):
                raise ValueError(f"separation: a standard error is non-finite or above {SEPARATION_SE}, or a logit beyond {SEPARATION_EST}")
        except Exception as e:  # noqa: BLE001 - a failed fit is reported, not hidden
            rows.append({**base, "term": "", "note": f"fit failed: {type(e).__name__}: {e}"[:200]})
            continue
        for _, r in t[t["term"].str.contains("frame")].iterrows():
            rows.append({**base, **r.to_dict(), "note": ""})
    out = pd.DataFrame(rows)
    if "p" not in out:
        out["p"] = np.nan
    out["p_holm"] = np.nan
    for judge, idx in out.groupby("judge").groups.items():
        main = out.loc[idx][out.loc[idx, "term"].str.contains("frame") & ~out.loc[idx, "term"].str.contains(":c")].index
        out.loc[main, "p_holm"] = stats.holm(out.loc[main, "p"].to_numpy())
    return out


def interaction(d: pd.DataFrame, ref: str) -> pd.DataFrame:
    """Model x frame: joint Wald test of every frame:model coefficient of a pooled GEE fit
    (``y ~ frame * model + paraphrase``, item clusters), per judge and outcome; Holm per judge."""
    rows = []
    for (judge, outcome), g in d.dropna(subset=["y"]).groupby(["judge", "outcome"], sort=True):
        base = {"judge": judge, "outcome": outcome, "models": ",".join(sorted(g["model"].unique()))}
        if g["model"].nunique() < 2 or g["y"].nunique() < 2 or g["item_id"].nunique() < 3:
            rows.append({**base, "chi2": np.nan, "df": np.nan, "p": np.nan, "note": "no variation or one model"})
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = stats.fit_gee_logit(g, f"y ~ C(frame, Treatment('{ref}')) * C(model) + C(paraphrase)", "item_id")
                w = stats.wald_terms(res, r"C\(frame.*:C\(model")
            ses = np.sqrt(np.diag(np.asarray(res.cov_params(), dtype=float)))
            if (not np.isfinite(w.chi2) or not np.isfinite(ses).all() or (ses > SEPARATION_SE).any()
                    or (np.abs(np.asarray(res.params, dtype=float)) > SEPARATION_EST).any()):
                raise ValueError(f"separation: a standard error is non-finite or above {SEPARATION_SE}, or a logit beyond {SEPARATION_EST}")
            rows.append({**base, "chi2": w.chi2, "df": w.df, "p": w.pvalue, "note": ""})
        except Exception as e:  # noqa: BLE001
            rows.append({**base, "chi2": np.nan, "df": np.nan, "p": np.nan,
                         "note": f"fit failed: {type(e).__name__}: {e}"[:200]})
    out = pd.DataFrame(rows)
    out["p_holm"] = np.nan
    for judge, idx in out.groupby("judge").groups.items():
        out.loc[idx, "p_holm"] = stats.holm(out.loc[idx, "p"].to_numpy())
    return out


def equivalence(items: pd.DataFrame) -> pd.DataFrame:
    """Embedding similarity (all-MiniLM-L6-v2) of the two requests of each item, the frame wrapper and
    any jailbreak template masked (only the paraphrased request is compared)."""
    from ...encoder import embed

    a, b = embed(items["request_a"].tolist()), embed(items["request_b"].tolist())
    return pd.DataFrame({"item_id": items["item_id"], "stratum": items["stratum"],
                         "similarity": (a * b).sum(1).round(6)})


def training_pools(p, names: list[str]) -> dict[str, pd.DataFrame]:
    """The known training prompts of the run's models: a LoRA adapter's ``training_data.csv`` beside
    its folder (the organism's). A base model's pretraining data is unknown and not audited."""
    from ...paths import ROOT

    pools = {}
    for name in names:
        adapter = p.models[name].adapter
        path = (ROOT / adapter).parent / "training_data.csv" if adapter else None
        if path is not None and path.is_file():
            df = pd.read_csv(path, keep_default_na=False)
            pools[path.relative_to(ROOT).as_posix()] = pd.DataFrame(
                {"id": [f"train-{i}" for i in range(len(df))], "prompt": df["prompt"].astype(str)})
    return pools


def run(p, items: pd.DataFrame, generations: pd.DataFrame, judgments: pd.DataFrame) -> dict[str, pd.DataFrame]:
    fr, s = p.studies[NAME], p.stats
    frames = list(fr.frames)
    pairs = pairs_of(frames)
    ref = fr.calibration_frame
    d = long_outcomes(generations, judgments)
    main = d[d["judge"] == MAIN_JUDGE]
    item_deltas, con = contrasts(d, pairs, s.n_bootstrap, p.seed, s.alpha)
    band = noise_band(d, fr.noise_quantile)
    con = con.merge(band[["judge", "outcome", "model", "q_gap"]], on=["judge", "outcome", "model"], how="left")
    con["beyond_noise_band"] = (con["ci_lo"] > con["q_gap"]) | (con["ci_hi"] < -con["q_gap"])
    # the low-familiarity stratum: items at or below each model's median Min-K% Prob
    fam = generations.groupby(["model", "item_id"])["familiarity"].first()
    low = fam[fam <= fam.groupby(level="model").transform("median")].reset_index()[["model", "item_id"]]
    extra = [contrasts(main.merge(low, on=["model", "item_id"]), pairs, s.n_bootstrap, p.seed, s.alpha,
                       "low_familiarity")[1]]
    for tier, g in main.groupby("tier"):
        extra.append(contrasts(g, pairs, s.n_bootstrap, p.seed, s.alpha, f"tier_{tier}")[1])
    eq = equivalence(items)
    strict = eq[eq["similarity"] >= eq["similarity"].quantile(2 / 3)]["item_id"]
    extra.append(contrasts(main[main["item_id"].isin(strict)], pairs, s.n_bootstrap, p.seed, s.alpha,
                           "strictest_equivalence")[1])
    thresholds = []
    for t in fr.similarity_thresholds:
        keep = eq[eq["similarity"] >= t]["item_id"]
        c = contrasts(main[main["item_id"].isin(keep)], pairs, s.n_bootstrap, p.seed, s.alpha, f"sim>={t}")[1]
        thresholds.append(c.assign(threshold=t) if len(c) else pd.DataFrame(
            [{"threshold": t, "subset": f"sim>={t}", "n_items": 0}]))
    con_all = pd.concat([con] + [e for e in extra if len(e)], ignore_index=True)
    # judge sensitivity: the refusal contrasts under the two judges side by side, and their agreement
    ref_c = con[con["outcome"] == "refusal"].pivot_table(index=["model", "contrast"], columns="judge",
                                                          values="delta").reset_index()
    agree = judges.agreement(judgments)
    tiers = generations.drop_duplicates("item_id")[["item_id", "role", "tier"]].rename(columns={"role": "stratum"})
    fam_table = fam.rename("familiarity_min_k").reset_index().merge(tiers, on="item_id")
    from .familiarity import lexical_overlap
    fam_table = fam_table.merge(lexical_overlap(items, training_pools(p, fr.models)), on="item_id", how="left")
    rates = stats.rate_table(d.dropna(subset=["y"]).assign(y=lambda x: x["y"].astype(bool)),
                             ["judge", "outcome", "model", "frame"], "y", s.alpha)
    return {
        "rates": rates,
        "contrasts": con_all,
        "item_contrasts": item_deltas,
        "noise_band": band,
        "gee": gee(d, ref, s.alpha),
        "interaction": interaction(d, ref),
        "equivalence": eq.merge(tiers[["item_id", "tier"]], on="item_id", how="left"),
        "equivalence_thresholds": pd.concat(thresholds, ignore_index=True),
        "judge_sensitivity": ref_c if len(ref_c) else pd.DataFrame([{"note": "no refusal contrasts"}]),
        "judge_agreement": agree if len(agree) else pd.DataFrame([{"note": "one judge"}]),
        "familiarity": fam_table,
    }
