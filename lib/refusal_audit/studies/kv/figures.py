"""The kv study's figures, drawn from its statistics tables (``stats/kv/*.csv``)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from ... import plots


def refusal_by_judge(rates: pd.DataFrame, arms: list[str], caption: str):
    """Refusal rate per judge and retention policy, main condition, Wilson 95 % CIs."""
    data = rates[rates["arm"].isin(arms)]
    judges = sorted(data["judge"].unique())
    fig, ax = plt.subplots(figsize=(max(6.4, 1.1 * len(judges)), 3.4))
    sns.barplot(data=data, x="judge", y="rate", hue="arm", order=judges, hue_order=arms, errorbar=None, ax=ax)
    plots.errorbars(ax, data, "judge", "arm", judges, arms)
    ax.set(ylim=(0, 1.05), ylabel="refusal rate", xlabel="judge", title="Refusal rate by judge and KV retention")
    ax.set_xticks(range(len(judges)), [plots.two_lines(j) for j in judges])  # long names would run together
    ax.legend(title="retention", fontsize=7, title_fontsize=8)
    plots.caption(fig, caption)
    return fig


def sink_dose_response(rates: pd.DataFrame, primary_sink: int, caption: str):
    """Refusal rate under sink_tail eviction as a function of the sink size, per judge; dashed: full."""
    tail = rates[rates["arm"].str.startswith("sink_tail")].copy()
    tail["sink_value"] = tail["arm"].str.extract(r"sink=(\d+)")[0].astype(float).fillna(primary_sink)
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    palette = dict(zip(sorted(rates["judge"].unique()), sns.color_palette()))
    for judge, g in tail.groupby("judge"):
        g = g.sort_values("sink_value")
        ax.errorbar(g["sink_value"], g["rate"], yerr=[g["rate"] - g["ci_lo"], g["ci_hi"] - g["rate"]],
                    marker="o", capsize=3, label=judge, color=palette[judge])
        full = rates[(rates["judge"] == judge) & (rates["arm"] == "full")]["rate"]
        if not full.empty:
            ax.axhline(full.iloc[0], ls="--", lw=0.8, color=palette[judge])
    sinks = sorted(tail["sink_value"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(sinks, [f"{s:g}" for s in sinks])
    ax.minorticks_off()
    ax.set(ylim=(0, 1.05), xlabel="sink tokens kept", ylabel="refusal rate",
           title="Sink dose-response (dashed: full retention)")
    ax.legend(fontsize=7)
    plots.caption(fig, caption)
    return fig


def filler_ablation(rates: pd.DataFrame, caption: str):
    """Refusal rate by filler length, full vs primary eviction, one panel per judge."""
    data = rates[rates["arm"].isin(["full", "sink_tail"])]
    g = sns.FacetGrid(data, col="judge", hue="arm", hue_order=["full", "sink_tail"], height=2.8, aspect=1.0,
                      ylim=(0, 1.05))
    g.map_dataframe(lambda data, color, label: plt.errorbar(
        data["filler_tokens"], data["rate"], yerr=[data["rate"] - data["ci_lo"], data["ci_hi"] - data["rate"]],
        marker="o", capsize=3, color=color, label=label))
    g.set_axis_labels("filler tokens", "refusal rate").add_legend(title="retention")
    g.figure.suptitle("Filler-length ablation", y=1.03)
    plots.caption(g.figure, caption)
    return g.figure


def mmlu_accuracy(acc: pd.DataFrame, caption: str):
    """MMLU-math accuracy per retention policy, Wilson 95 % CIs."""
    fig, ax = plt.subplots(figsize=(4.2, 3.0))
    order = list(acc["arm"])
    sns.barplot(data=acc, x="arm", y="rate", order=order, errorbar=None, ax=ax, color=sns.color_palette()[0])
    for bar, (_, r) in zip(ax.patches, acc.iterrows()):
        cx = bar.get_x() + bar.get_width() / 2
        ax.plot([cx, cx], [r["ci_lo"], r["ci_hi"]], color="0.15", lw=1)
    ax.axhline(0.25, ls=":", color="0.4", lw=0.8)
    ax.set(ylim=(0, 1.05), xlabel="retention", ylabel="accuracy", title="MMLU-math under the same retention")
    plots.caption(fig, caption + " Dotted: chance (25 %).")
    return fig
