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
