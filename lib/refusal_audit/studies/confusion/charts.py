"""The confusion study's figures, drawn from its statistics tables (``stats/confusion/*.csv``).
Aggregates and decisions only: no reply and no prompt text is drawn."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

from ...plots import caption as add_caption
from . import analysis

# cell codes of the confusion map
STATES = ["not scored", "accepted", "rejected", "rejected, confused"]
COLOURS = ["#ffffff", "#cfe3f1", "#8c8c8c", "#c0392b"]


def _cluster_order(prompts: pd.DataFrame) -> list[str]:
    first = prompts.sort_values(["dataset", "cluster"]).drop_duplicates("cluster")
    return first["cluster"].tolist()


def confusion_map(prompts: pd.DataFrame, paraphrases: pd.DataFrame | None, text: str):
    """Which paraphrases of which intent flip: one panel per (model, judge); rows = clusters
    (grouped by dataset), columns = members (0 = seed); red = a rejection with an accepted paraphrase
    of the same intent above theta (a confusion event), grey = other rejections, blue = accepted,
    white = not scored (failed a gate, or the judge could not parse the reply)."""
    arms = prompts[["model", "judge"]].drop_duplicates().sort_values(["model", "judge"]).values.tolist()
    order = _cluster_order(prompts)
    members = int(max(prompts["member"].max(), paraphrases["member"].max() if paraphrases is not None
                      and len(paraphrases) else 0)) + 1
    datasets = prompts.drop_duplicates("cluster").set_index("cluster")["dataset"].reindex(order)
    height = max(3.0, 0.09 * len(order) + 1.4)
    fig, axes = plt.subplots(1, len(arms), figsize=(1.25 * len(arms) + 1.6, height), sharey=True, squeeze=False)
    row = {c: i for i, c in enumerate(order)}
    for ax, (model, judge) in zip(axes[0], arms):
        grid = np.zeros((len(order), members), dtype=int)
        d = prompts[(prompts["model"] == model) & (prompts["judge"] == judge)]
        for c, m, acc, conf in zip(d["cluster"], d["member"], d["accepted"].astype(bool), d["confused"].astype(bool)):
            grid[row[c], int(m)] = 1 if acc else (3 if conf else 2)
        ax.imshow(grid, cmap=ListedColormap(COLOURS), vmin=0, vmax=3, aspect="auto", interpolation="nearest")
        ax.set_title(f"{model}\n{judge}", fontsize=6)
        ax.set_xticks(range(members), ["seed"] + [str(i) for i in range(1, members)], fontsize=5)
        ax.tick_params(axis="y", labelsize=4, length=0)
        ax.grid(False)
        bounds = np.flatnonzero(datasets.to_numpy()[1:] != datasets.to_numpy()[:-1])
        for b in bounds:
            ax.axhline(b + 0.5, color="0.2", lw=0.6)
    axes[0][0].set_yticks(range(len(order)), order)
    top = 1 - 0.75 / height  # room above the panels' titles for the legend and the title, in inches
    fig.subplots_adjust(top=top)
    fig.legend(handles=[Patch(facecolor=c, edgecolor="0.6", label=s) for s, c in zip(STATES, COLOURS)],
               loc="lower center", ncol=4, fontsize=6, bbox_to_anchor=(0.5, top + 0.45 / height))
    fig.suptitle("Per-cluster confusion map (rows: intents, grouped by source set; columns: phrasings)",
                 y=top + 0.8 / height, va="bottom", fontsize=8)
    add_caption(fig, text)
    return fig


def ci_distribution(prompts: pd.DataFrame, text: str):
    """The Confusion Index and each of its signals alone over the rejected prompts that have an
    accepted neighbour, per model and judge."""
    rej = prompts[prompts["ci"].notna()]
    long = rej.melt(id_vars=["model", "judge"], value_vars=["ci", "drift", "shift", "contrast"],
                    var_name="signal", value_name="value")
    models = sorted(long["model"].unique()) or ["(none)"]
    fig, axes = plt.subplots(1, len(models), figsize=(3.6 * len(models), 3.2), sharey=True, squeeze=False)
    judges_ = sorted(prompts["judge"].unique())
    for ax, model in zip(axes[0], models):
        d = long[long["model"] == model]
        if len(d):
            sns.boxplot(data=d, x="signal", y="value", hue="judge", hue_order=judges_, order=["ci", "drift", "shift",
                                                                                               "contrast"],
                        ax=ax, fliersize=1.5, linewidth=0.7)
            ax.legend(fontsize=6, title="judge", title_fontsize=6)
        else:
            ax.text(0.5, 0.5, "no rejected prompt\nwith an accepted neighbour", ha="center", va="center",
                    transform=ax.transAxes, fontsize=7)
        ax.set(title=model, xlabel="", ylabel="value over N_k(r)", ylim=(0, 1))
    fig.suptitle("Confusion Index and its signals (rejected prompts with an accepted paraphrase)", y=1.02,
                 fontsize=8)
    add_caption(fig, text)
    return fig


def frr_vs_rate(table: pd.DataFrame, planted: pd.DataFrame | None, text: str):
    """FRR against Confusion Rate per model and judge, with bootstrap CIs over intents; the planted
    arms (known answers) as hollow markers."""
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    judges_ = sorted(table["judge"].unique())
    models = sorted(table["model"].unique())
    colours = dict(zip(judges_, sns.color_palette(n_colors=len(judges_))))
    markers = dict(zip(models, "osD^v<>"))
    for _, r in table.iterrows():
        ax.errorbar(r["frr"], r["confusion_rate"], xerr=[[r["frr"] - r["frr_lo"]], [r["frr_hi"] - r["frr"]]],
                    yerr=[[r["confusion_rate"] - r["confusion_rate_lo"]], [r["confusion_rate_hi"] - r["confusion_rate"]]],
                    fmt=markers[r["model"]], color=colours[r["judge"]], capsize=2, lw=0.8, ms=5)
    if planted is not None and len(planted):
        for (scope, arm), g in planted.groupby(["scope", "arm"]):
            v = g.set_index("statistic")["recovered"]
            ax.plot(v["reject_rate"], v["confusion_rate"], marker="o", mfc="none", mec="0.3", ls="none", ms=7)
            ax.annotate(f"planted {arm} ({scope})", (v["reject_rate"], v["confusion_rate"]), fontsize=6, xytext=(4, 4),
                        textcoords="offset points", color="0.3")
    handles = ([plt.Line2D([], [], color=colours[j], marker="o", ls="none", label=j) for j in judges_]
               + [plt.Line2D([], [], color="0.3", marker=markers[m], ls="none", label=m) for m in models])
    ax.legend(handles=handles, fontsize=6, loc="best")
    ax.set(xlim=(-0.03, 1.03), ylim=(-0.03, 1.03), xlabel="false-rejection rate (benign clusters)",
           ylabel="Confusion Rate", title="Global FRR vs local Confusion Rate")
    add_caption(fig, text)
    return fig


def rate_vs_null(table: pd.DataFrame, nulls: pd.DataFrame, text: str):
    """The verdict's statistic: per arm, the benign Confusion Rate with its Wilson interval beside its null (the
    same rejections placed at random per source set: mean and 95 % band); the verdict in words at the right.
    CR below the band: the refusals follow intents; inside it: confused as a refuser without intents is."""
    cols = [c for c in ("confusion_rate_null", "confusion_rate_null_lo", "confusion_rate_null_hi", "confusion_rate_p_below",
                        "n_rejected", "n_prompts", "alpha", "confusion_rate_wording_null", "wording_p_below")
            if c in nulls]
    t = table.merge(nulls[["model", "judge", *cols]].rename(columns={"n_rejected": "n_rej", "n_prompts": "n_prm"}),
                    on=["model", "judge"]).sort_values(["model", "judge"]).reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(6.4, 0.55 * len(t) + 1.4))
    y = np.arange(len(t))[::-1]
    for yi, (_, r) in zip(y, t.iterrows()):
        ax.fill_betweenx([yi - 0.3, yi + 0.3], r["confusion_rate_null_lo"], r["confusion_rate_null_hi"],
                         color="0.85", lw=0)
        ax.plot([r["confusion_rate_null"]] * 2, [yi - 0.3, yi + 0.3], color="0.4", lw=1)
        if r["n_rej"]:
            ax.errorbar(r["confusion_rate"], yi, xerr=[[r["confusion_rate"] - r["confusion_rate_w_lo"]],
                                                       [r["confusion_rate_w_hi"] - r["confusion_rate"]]],
                        fmt="o", color="#c0392b", capsize=2, lw=0.9, ms=5)
        if pd.notna(r.get("confusion_rate_wording_null", np.nan)):
            ax.plot(r["confusion_rate_wording_null"], yi, marker="d", mfc="none", mec="0.2", ms=5, ls="none")
        word = analysis.null_answer(r.drop(["n_rejected", "n_prompts"], errors="ignore")
                                    .rename({"n_rej": "n_rejected", "n_prm": "n_prompts"}))
        ax.annotate(f"{word} (p {r['confusion_rate_p_below']:.3f}, n {int(r['n_rej'])})", (1.04, yi), fontsize=6,
                    va="center", annotation_clip=False)
    ax.set_yticks(y, [f"{m} / {j}" for m, j in zip(t["model"], t["judge"])], fontsize=7)
    ax.set(xlim=(-0.03, 1.03), xlabel="Confusion Rate, benign rejections (red: Wilson 95 %; grey: random-placement "
           "null, mean and 95 %; diamond: placed among\nprompts of the same harm words, mean)",
           title="Confusion Rate beside its null")
    add_caption(fig, text)
    return fig
