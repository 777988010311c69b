"""The frames study's confirmatory analysis: one GEE fit per (judge, outcome, subset, model) with
item-clustered errors, the declared frame-pair contrasts and Wald tests from it, Holm over the declared family,
the paraphrase-noise comparison, and the power and smallest detectable effect at the run's own item count
(``detectable``); ``verdicts`` says each significant or untestable test in words (definitions in DEFINITIONS.md)."""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ... import generation, stats
from .params import NAME, NULL, SUBSETS, analysed_models, declared_family, interaction_models, pairs_of

# (quasi-)separation: a logit SE above SEPARATION_SE or a coefficient beyond +/- SEPARATION_EST (a cell
# with no events or only events); the same model is then fitted on the risk-difference scale (identity
# link, the linear probability model; DEFINITIONS.md) and the row says so in ``scale``
SEPARATION_SE = 50.0

SEPARATION_EST = 15.0

FORMULA = "y ~ C(frame, Treatment('{ref}')) + C(paraphrase) + c + C(frame, Treatment('{ref}')):c"

COV_TYPE = {"mancl_derouen": "bias_reduced", "liang_zeger": "robust"}


def _separated(res) -> str:
    se = np.sqrt(np.diag(np.asarray(res.cov_params(), dtype=float)))
    est = np.asarray(res.params, dtype=float)
    if not np.isfinite(se).all() or (se > SEPARATION_SE).any() or (np.abs(est) > SEPARATION_EST).any():
        return f"separation: a standard error is non-finite or above {SEPARATION_SE}, or a logit beyond {SEPARATION_EST}"
    return ""


LOG_ODDS, RISK_DIFFERENCE = "log-odds", "risk difference (the logit separated)"


def _fit(g: pd.DataFrame, formula: str, cov_type: str):
    """(result, scale) with scale LOG_ODDS, or RISK_DIFFERENCE when the logit separates; or (None, why
    no fit)."""
    if g["y"].nunique() < 2 or g["cluster"].nunique() < 3:
        return None, "no fit: outcome constant or fewer than 3 clusters"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = stats.fit_gee_logit(g, formula, cluster="cluster", cov_type=COV_TYPE[cov_type])
            if not _separated(res):
                return res, LOG_ODDS
            res = stats.fit_gee_linear(g, formula, cluster="cluster", cov_type=COV_TYPE[cov_type])
            finite = np.isfinite(np.sqrt(np.diag(np.asarray(res.cov_params(), dtype=float)))).all()
        return (res, RISK_DIFFERENCE) if finite else (None, "fit failed: the logit separated and the "
                                                      "risk-difference fit has non-finite standard errors")
    except Exception as e:  # noqa: BLE001 - a failed fit is reported, not hidden
        return None, f"fit failed: {type(e).__name__}: {e}"[:200]


def _subset(d: pd.DataFrame, subset: str) -> pd.DataFrame:
    return d if subset == "all" else d[~d["harmful_request"]]


def _per_item(g: pd.DataFrame, pairs) -> pd.DataFrame:
    """Per model, item and frame pair: Delta (both paraphrases), Delta under A and under B, the matched
    paraphrase contrast, the decode-noise variance of either (``noise_var``), and the item's cluster."""
    by = ["model"]
    args = ("item_id", "frame", "paraphrase", "y", pairs)
    out = stats.frame_contrasts(g, *args, by=by)
    for r in ("A", "B"):
        one = stats.frame_contrasts(g[g["paraphrase"] == r], *args, by=by)
        out = out.merge(one.rename(columns={"delta": f"delta_{r.lower()}"})[[*by, "item_id", "f1", "f2", f"delta_{r.lower()}"]],
                        on=[*by, "item_id", "f1", "f2"], how="left")
    out = out.merge(stats.paraphrase_contrasts(g, *args, by=by), on=[*by, "item_id", "f1", "f2"], how="left")
    out = out.merge(stats.decode_noise_variance(g, *args, by=by), on=[*by, "item_id", "f1", "f2"], how="left")
    return out.merge(g.drop_duplicates("item_id")[["item_id", "cluster"]], on="item_id", how="left")


SHARED = " (shared familiarity slopes; sensitivity)"


def _wald_row(g: pd.DataFrame, ref_frame: str, reference_model: str, other: str, cov_type: str,
              below: int, shared_slopes: bool = False) -> dict:
    """Joint Wald test that ``other``'s frame effects equal ``reference_model``'s: a pooled fit of the two
    with item clusters and the primary model's terms PER MODEL (``y ~ (frame + paraphrase + C~ + frame:C~) *
    model``, C~ centred within each model), so the frame x model coefficients are exactly the difference of
    the two models' own primary frame effects; chi2 on (frames - 1) df, or F(q, G - 1) with the t-reference
    rule. ``shared_slopes``: the sensitivity fit with paraphrase, C~ and frame:C~ common to both models (the
    test before the slopes were fitted per model)."""
    g = g[g["model"].isin([reference_model, other])]
    if g["model"].nunique() < 2:
        return {"status": "no fit: a model has no rows"}
    g = pd.concat([x.assign(c=stats.mean_centre(x, "familiarity", cluster="item_id")) for _, x in g.groupby("model")])
    frame, model = f"C(frame, Treatment('{ref_frame}'))", f"C(model, Treatment('{reference_model}'))"
    formula = (f"y ~ {frame} * {model} + C(paraphrase) + c + {frame}:c" if shared_slopes
               else f"y ~ ({frame} + C(paraphrase) + c + {frame}:c) * {model}")
    res, scale = _fit(g, formula, cov_type)
    if res is None:
        return {"status": scale}
    w = stats.wald_terms(res, r"^C\(frame[^:]*\]:C\(model[^:]*\]$")
    n = int(res.model.num_group)
    dist, p = stats.wald_reference(w, n, stats.use_t_reference(n, below))
    return {"stat": w.chi2, "dist": dist, "df": float(w.df), "p": p, "n_clusters": n, "scale": scale, "status": "ok"}


def confirmatory(p, d: pd.DataFrame, judges_in_run: dict[str, str]) -> dict[str, pd.DataFrame]:
    """``confirmatory`` (one row per judge, outcome, subset, model and contrast: the GEE contrast with
    SE, CI, p; the mean Delta; the paraphrase-noise test; Holm over the declared family; the flag),
    ``reversals`` and ``noise_simulation`` (the noise test's size and power at this run's item count)."""
    fr, s = p.studies[NAME], p.stats
    names = fr.confirmatory.contrasts + ["-".join(x) for x in pairs_of(list(fr.frames))]
    pairs = [tuple(k.split("-")) for k in dict.fromkeys(names)]
    ref = fr.reference_frame
    term = f"C(frame, Treatment('{ref}'))"
    formula = FORMULA.format(ref=ref)
    rows, rev = [], []
    data = d.dropna(subset=["y"])
    for (judge, outcome), jo in data.groupby(["judge", "outcome"], sort=True):
        for subset in SUBSETS:
            sub = _subset(jo, subset)
            items = _per_item(sub, pairs) if len(sub) else pd.DataFrame(columns=["model", "f1", "f2"])
            for model in analysed_models(fr):
                g = sub[sub["model"] == model]
                g = g.assign(c=stats.mean_centre(g, "familiarity", cluster="item_id")) if len(g) else g
                res, scale = _fit(g, formula, fr.cov_type) if len(g) else (None, "no fit: no rows")
                use_t = res is not None and stats.use_t_reference(int(res.model.num_group), fr.t_below_clusters)
                for f1, f2 in pairs:
                    base = {"judge": judge, "outcome": outcome, "subset": subset, "model": model, "contrast": f"{f1}-{f2}"}
                    it = items[(items["model"] == model) & (items["f1"] == f1) & (items["f2"] == f2)].dropna(subset=["delta"])
                    row = dict(base, n_items=len(it), n_clusters=it["cluster"].nunique() if len(it) else 0,
                               delta=float(it["delta"].mean()) if len(it) else np.nan,
                               paraphrase_delta=float(it["delta_p"].mean()) if len(it) else np.nan)
                    if res is not None:
                        row.update(stats.linear_contrast(res, stats.treatment_contrast(term, ref, f1, f2), s.alpha, use_t),
                                   n_clusters=int(res.model.num_group), scale=scale, status="ok")
                    else:
                        row["status"] = scale
                    if it["delta_p"].notna().sum() >= 2:
                        t = stats.paraphrase_noise_test(it["delta"], it["delta_p"], it["cluster"], s.n_bootstrap, p.seed, s.alpha)
                        both = it.dropna(subset=["delta_p"])
                        row.update(ms_delta=t.frame, ms_paraphrase=t.paraphrase, noise_margin=t.margin,
                                   noise_lo=t.lo, noise_hi=t.hi, noise_p=t.pvalue, beyond_noise=t.beyond,
                                   rms_swing_net=float(np.sqrt(max(t.paraphrase - both["noise_var"].mean(), 0.0))))
                    rows.append(row)
                    if len(it):
                        rev.append(stats.reversals(it.assign(**base), list(base)))
            declared = judge in fr.confirmatory.judges and outcome in fr.confirmatory.outcomes
            # the declared per-model fit, then (for the declared judges and outcomes) the shared-slope sensitivity
            for shared in (False, True) if declared else (False,):
                tail = SHARED if shared else ""
                for other in interaction_models(fr):
                    rows.append({"judge": judge, "outcome": outcome, "subset": subset, "model": other,
                                 "contrast": f"frame x model vs {fr.interaction_reference}{tail}",
                                 **_wald_row(sub, ref, fr.interaction_reference, other, fr.cov_type, fr.t_below_clusters,
                                             shared)})
                for b, instruct in fr.base_of.items():
                    rows.append({"judge": judge, "outcome": outcome, "subset": subset, "model": instruct,
                                 "contrast": f"H3: frame x (base {b} vs instruct){tail}",
                                 **_wald_row(sub, ref, instruct, b, fr.cov_type, fr.t_below_clusters, shared)})
    table = pd.DataFrame(rows)
    family = declared_family(fr, judges_in_run).assign(confirmatory=True)
    family = pd.concat([family, declared_family(fr, judges_in_run, null=True).assign(null_control=True)])
    keys = ["judge", "outcome", "subset", "model", "contrast"]
    table = family.merge(table, on=keys, how="outer")
    table["confirmatory"] = table["confirmatory"].fillna(False).astype(bool)
    null = table["null_control"].fillna(False).astype(bool)
    table = table.drop(columns="null_control")
    table["status"] = table["status"].fillna("no fit: no rows for this judge and outcome")
    for col in ("scale", "estimate", "se", "ci_lo", "ci_hi", "p", "delta", "beyond_noise"):
        if col not in table:
            table[col] = np.nan
    table["p_holm"] = np.nan
    conf = table["confirmatory"]
    if conf.any():
        table.loc[conf, "p_holm"] = stats.holm_family(table.loc[conf, "p"].to_numpy(dtype=float))
    if null.any():  # the null control: the same declared tests on its rows, Holm within them
        table.loc[null, "p_holm"] = stats.holm_family(table.loc[null, "p"].to_numpy(dtype=float))
    table["family"] = np.where(conf, f"confirmatory (Holm over {int(conf.sum())})",
                               np.where(null, f"null control (Holm over {int(null.sum())})", "exploratory (uncorrected)"))
    table["significant"] = np.where(conf | null, table["p_holm"] < s.alpha, table["p"] < s.alpha)
    table["beyond_noise"] = table["beyond_noise"].astype("boolean")
    pair = table["contrast"].str.fullmatch(r"[^-\s]+-[^-\s]+") & (conf | null)
    # the primary claim (seed 6.2): a frame-pair contrast significant after Holm over its declared family
    table["divergence"] = pd.Series(np.where(pair, table["significant"], np.nan), dtype="object").map(
        {True: "divergence", False: "no divergence"})
    table, sim = detectable(p, table, conf | null, int(conf.sum()))
    order = keys + ["family", "scale", "estimate", "se", "ci_lo", "ci_hi", "dist", "df", "p", "p_holm", "significant", "delta",
                    "paraphrase_delta", "divergence", "ms_delta", "ms_paraphrase", "noise_margin", "noise_lo",
                    "noise_hi", "noise_p", "beyond_noise", "rms_swing_net", "mde_swing_sd", "mde_80", "mde_80_primary",
                    "fpr_primary", "power_primary_118", "power_primary_036", "power_primary_200", "power_noise_118",
                    "power_noise_036", "power_noise_200", "n_items", "n_clusters", "stat", "status",
                    "confirmatory"]
    table = table[[c for c in order if c in table] + [c for c in table if c not in order]]
    table = table.sort_values(["confirmatory", *keys], ascending=[False, True, True, True, True, True], ignore_index=True)
    return {"confirmatory": table, "reversals": pd.concat(rev, ignore_index=True) if rev else pd.DataFrame(),
            "noise_simulation": sim}


def n_decodes(fr) -> int:
    """Replies per cell (item, frame, paraphrase): the decoding grid's size."""

    return len(generation.decoding_grid(fr.temperatures, fr.seeds, fr.max_new_tokens))


SEED_EFFECTS = {"118": 0.118, "036": 0.036, "200": 0.2}   # the seed's +11.8 and -3.6 points (abs), and +20


def detectable(p, table: pd.DataFrame, tested: pd.Series, family_size: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The simulation grid (``stats.simulate_noise_grid``) at each item count of the tested frame-pair rows
    (this run's n, decodes and family size) and, per such row, at the row's rewording swing
    (``rms_swing_net``: root mean square of Delta_P_i net of decode noise; ``mde_swing_sd`` the grid column at
    or above it): ``mde_80`` (beyond noise AND significant at Holm's strictest step, 80 % power),
    ``mde_80_primary`` (the primary contrast alone), ``fpr_primary`` (the primary's simulated rejection rate
    at no frame effect, largest over the grid's swings) and the power at the seed's effect sizes
    (``power_primary_*``, ``power_noise_*``: 118 = 11.8 points, 036 = 3.6, 200 = 20). Returns (table, grid)."""
    fr, s = p.studies[NAME], p.stats
    rows = tested & table["contrast"].str.fullmatch(r"[^-\s]+-[^-\s]+") & table["rms_swing_net"].notna() \
        if "rms_swing_net" in table else tested & False
    cols = ["mde_80", "mde_80_primary", "mde_swing_sd", "fpr_primary",
            *[f"power_{k}_{e}" for k in ("primary", "noise") for e in SEED_EFFECTS]]
    table = table.assign(**{c: np.nan for c in cols})
    grids = {}
    # the null control's cells hold the sampled decodes only (``sampled_null``)
    decodes = pd.Series(np.where(table["model"].str.endswith(NULL), max(n_decodes(fr) - 1, 1), n_decodes(fr)),
                        index=table.index)
    for n, k in sorted({(int(table.at[i, "n_items"]), int(decodes[i])) for i in table.index[rows]}):
        grids[n, k] = stats.simulate_noise_grid(n, k, seed=p.seed, alpha=s.alpha, family_size=max(family_size, 1))
    for i in table.index[rows]:
        grid = grids[int(table.at[i, "n_items"]), int(decodes[i])]
        sd = stats.swing_column(grid, table.at[i, "rms_swing_net"])
        col = grid[np.isclose(grid["swing_sd"], sd)].set_index("frame_effect")
        table.loc[i, ["mde_swing_sd", "mde_80", "mde_80_primary"]] = (
            sd, stats.min_detectable(grid, sd), stats.min_detectable(grid, sd, rate="rate_significant"))
        table.loc[i, "fpr_primary"] = grid.loc[grid["frame_effect"] == 0, "rate_significant"].max()
        for e, v in SEED_EFFECTS.items():
            table.loc[i, [f"power_primary_{e}", f"power_noise_{e}"]] = col.loc[v, ["rate_significant", "rate_detect"]].to_numpy()
    sim = pd.concat(grids.values(), ignore_index=True) if grids else pd.DataFrame()
    return table, sim


def _could_see(r) -> str:
    """What a test that found nothing could have found (``mde_80_primary``, the primary contrast's MDE) and
    its simulated power at the seed's effect sizes."""
    if pd.isna(r.get("mde_swing_sd")):
        return ""
    where = f"{int(r['n_items'])} items, rewording swing {r['rms_swing_net']:.2f} (RMS net of decode noise)"
    mde = r["mde_80_primary"]
    head = (f"; this design ({where}) had 80 % power for no frame effect up to {max(stats.FRAME_EFFECTS):.2f}"
            if pd.isna(mde) else f"; this design ({where}) had 80 % power only for a frame effect of {mde:.2f} "
            f"({100 * mde:.0f} points) or more")
    return head + f" ({power_words(r)})"


def power_words(r) -> str:
    """The primary contrast's simulated false-positive rate and power at the seed's sizes, in words."""
    return (f"simulated false-positive rate {100 * r['fpr_primary']:.1f} %; power {r['power_primary_118']:.2f} at "
            f"11.8 points, {r['power_primary_036']:.2f} at 3.6, {r['power_primary_200']:.2f} at 20")


def verdicts(table: pd.DataFrame, alpha: float) -> list[str]:
    """One sentence per confirmatory test and per null-control test (Holm within the null control's
    own family), generated from ``confirmatory.csv``."""
    out = []
    for _, r in table[table["family"].str.startswith(("confirmatory", "null control"))].iterrows():
        head = f"{r['model']}, {r['outcome']} ({r['judge']} judge, {r['subset']} items), {r['contrast']}: "
        if r["status"] != "ok":
            out.append(head + f"NOT TESTED ({r['status']}); it counts in its Holm family as not rejected.")
            continue
        sig = "significant" if r["p_holm"] < alpha else "not significant"
        holm = f"Holm p = {r['p_holm']:.3g}"
        pairwise = "-" in r["contrast"] and not r["contrast"].startswith(("H3", "frame x"))
        if "estimate" in r and pd.notna(r.get("estimate")) and pairwise:
            noise = ("beyond paraphrase noise" if bool(r["beyond_noise"]) else
                     "not beyond paraphrase noise") if pd.notna(r["beyond_noise"]) else "noise test not computable"
            found = r["p_holm"] < alpha
            div = "DIVERGENCE" if found else "no divergence"
            out.append(head + f"{div}: Delta {r['delta']:+.3f} ({100 * r['delta']:+.0f} points), {r['scale']} "
                       f"{r['estimate']:+.2f} [{r['ci_lo']:+.2f}, {r['ci_hi']:+.2f}], p = {r['p']:.3g}, {holm}: {sig}; "
                       f"secondary: {noise}{_could_see(r) if not found else ''}.")
        else:
            out.append(head + f"{r['dist']} = {r['stat']:.2f}, p = {r['p']:.3g}, {holm}: {sig}.")
    return out
