"""The frames study's figures: per model, the three frame contrasts per outcome with their CIs and
the paraphrase-noise band drawn behind them (aligned vs not aligned side by side); the contrasts
across equivalence (similarity) thresholds."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...plots import caption as add_caption

MAIN = "outcome"


def contrasts(con: pd.DataFrame, band: pd.DataFrame, models: list[str], text: str):
    c = con[(con["subset"] == "all") & (con["judge"] == MAIN)]
    outcomes = [o for o in ("refusal", "harmful_compliance", "template_completion", "off_topic")
                if o in set(c["outcome"])]
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.4), sharey=True, squeeze=False)
    for ax, m in zip(axes[0], models):
        cm = c[c["model"] == m]
        pairs = list(dict.fromkeys(cm["contrast"]))
        width = 0.8 / max(len(outcomes), 1)
        for k, o in enumerate(outcomes):
            b = band[(band["judge"] == MAIN) & (band["model"] == m) & (band["outcome"] == o)]
            x0 = np.arange(len(pairs)) + (k - (len(outcomes) - 1) / 2) * width
            if len(b) and np.isfinite(b["q_gap"].iloc[0]):
                q = float(b["q_gap"].iloc[0])
                for x in x0:
                    ax.fill_between([x - width / 2, x + width / 2], -q, q, color="0.85", lw=0, zorder=0)
            co = cm[cm["outcome"] == o].set_index("contrast").reindex(pairs)
            err = np.vstack([co["delta"] - co["ci_lo"], co["ci_hi"] - co["delta"]])
            ax.errorbar(x0, co["delta"], yerr=np.nan_to_num(err), fmt="o", ms=4, capsize=2, label=o, zorder=3)
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set_xticks(range(len(pairs)), pairs)
        ax.set_title(m, fontsize=9)
        ax.set_ylim(-1.05, 1.05)
    axes[0][0].set_ylabel("mean Delta over items (share of decodes)")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    add_caption(fig, text + " Points: mean per-item Delta with item-cluster bootstrap 95 % CI; grey: the paraphrase-"
                "noise band (+/- the 95th percentile of |A - B| per item and frame) for each outcome. Outcome judge "
                "(judges/outcome.py).")
    return fig


def verdict(conf: pd.DataFrame, alpha: float, text: str):
    """The headline: per declared frame-pair test (confirmatory and null-control families), (a) the primary
    contrast (GEE, log-odds or risk difference) with its 95 % CI, filled when significant after Holm; (b) its
    Holm p against the decision line alpha (the band below it: "divergence"); (c) the mean-square noise
    comparison M = mean dF^2 - mean dP^2 with its CI (the band above 0: "beyond paraphrase noise")."""
    pair = conf["contrast"].str.fullmatch(r"[^-\s]+-[^-\s]+")
    t = conf[conf["family"].str.startswith(("confirmatory", "null control")) & pair & (conf["status"] == "ok")]
    t = t.sort_values(["family", "outcome", "subset", "model", "contrast"]).reset_index(drop=True)
    labels = [f"{r.model} | {r.outcome[:7]} {r.subset[:8]} | {r.contrast}" for r in t.itertuples()]
    y = np.arange(len(t))[::-1]
    sig = (t["p_holm"] < alpha).to_numpy()
    fig, ax = plt.subplots(1, 3, figsize=(13, 0.22 * len(t) + 1.6), sharey=True, gridspec_kw={"width_ratios": [3, 1.4, 2]})
    panels = [("estimate", "ci_lo", "ci_hi"), (None, None, None), ("noise_margin", "noise_lo", "noise_hi")]
    for k, (est, lo, hi) in enumerate(panels):
        if est is None:
            ax[k].axvspan(0, alpha, color="tab:green", alpha=0.15, lw=0)
            ax[k].scatter(t["p_holm"].clip(lower=1e-4), y, c=np.where(sig, "tab:red", "0.4"), s=14)
            ax[k].axvline(alpha, color="tab:green", lw=1)
            ax[k].set_xscale("log")
            ax[k].set_xlabel(f"Holm p (band < {alpha}: divergence)", fontsize=8)
            continue
        err = np.vstack([t[est] - t[lo], t[hi] - t[est]])
        for mask, face in ((sig, "tab:red"), (~sig, "white")):
            ax[k].errorbar(t.loc[mask, est], y[mask], xerr=np.nan_to_num(err[:, mask]), fmt="o", ms=4, capsize=2,
                           color="tab:red" if face == "tab:red" else "0.4", mfc=face)
        ax[k].axvline(0, color="0.3", lw=0.8)
    hi = np.abs(t["noise_hi"].to_numpy(dtype=float)) if "noise_hi" in t else np.array([])
    xmax = float(hi[np.isfinite(hi)].max()) if np.isfinite(hi).any() else 0.05
    ax[2].axvspan(0, max(xmax, 0.05) * 1.1, color="tab:blue", alpha=0.1, lw=0)
    ax[0].set_yticks(y, labels, fontsize=6)
    ax[0].set_xlabel("primary contrast (GEE, 95 % CI; red: divergence after Holm)", fontsize=8)
    ax[2].set_xlabel("mean dF^2 - mean dP^2, 95 % CI (band: beyond noise)", fontsize=8)
    fig.tight_layout()
    add_caption(fig, text + " Each row a declared frame-pair test (outcome judge; the null control's rows carry ':null'). "
                "The verdict is the primary contrast after Holm (middle); the noise comparison is secondary "
                "(studies/frames/DEFINITIONS.md).")
    return fig


def equivalence(thr: pd.DataFrame, text: str):
    t = thr[(thr.get("judge") == MAIN) & (thr.get("outcome") == "refusal")] if "judge" in thr else thr.iloc[:0]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for (m, c), g in t.groupby(["model", "contrast"]):
        g = g.sort_values("threshold")
        ax.errorbar(g["threshold"], g["delta"], yerr=np.nan_to_num(np.vstack([g["delta"] - g["ci_lo"],
                                                                             g["ci_hi"] - g["delta"]])),
                    marker="o", ms=3, capsize=2, label=f"{m} {c}")
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xlabel("items kept: A-B embedding similarity >= threshold")
    ax.set_ylabel("mean Delta, refusal")
    if len(t):
        ax.legend(fontsize=6)
    fig.tight_layout()
    add_caption(fig, text + " Refusal contrasts recomputed on the items whose two paraphrases are at least this "
                "similar (all-MiniLM-L6-v2 cosine of the requests, wrapper masked).")
    return fig


def semantic(table: pd.DataFrame, text: str):
    """Semantic response divergence (``secondary.semantic_divergence``): per model and frame pair, the greedy
    replies' mean cosine distance across frames minus across paraphrases, with its 95 % interval."""
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    if "difference" not in table:
        ax.text(0.5, 0.5, str(table.iloc[0].get("note", "no table")), ha="center", va="center", fontsize=9)
        ax.set_axis_off()
        add_caption(fig, text)
        return fig
    models = list(dict.fromkeys(table["model"]))
    pairs = list(dict.fromkeys(table["contrast"]))
    width = 0.8 / max(len(pairs), 1)
    for k, pair in enumerate(pairs):
        t = table[table["contrast"] == pair].set_index("model").reindex(models)
        x = np.arange(len(models)) + (k - (len(pairs) - 1) / 2) * width
        err = np.vstack([t["difference"] - t["ci_lo"], t["ci_hi"] - t["difference"]])
        ax.errorbar(x, t["difference"], yerr=np.nan_to_num(err), fmt="o", ms=4, capsize=2, label=pair)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xticks(range(len(models)), models, fontsize=8)
    ax.set_ylabel("cosine distance: across frames\nminus across paraphrases")
    ax.legend(fontsize=7)
    ax.set_title("semantic response divergence (greedy replies, all-MiniLM-L6-v2)", fontsize=9)
    fig.tight_layout()
    add_caption(fig, text)
    return fig
