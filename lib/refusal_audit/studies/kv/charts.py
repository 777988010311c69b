"""The kv study's figures, drawn from its statistics tables (``stats/kv/*.csv``)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from ... import plots


def _panels(models: list[str], width: float, height: float = 3.4):
    fig, axes = plt.subplots(1, len(models), figsize=(width * len(models), height), squeeze=False, sharey=True)
    return fig, dict(zip(models, axes[0]))


def refusal_by_judge(rates: pd.DataFrame, arms: list[str], caption: str):
    """Refusal rate per judge and retention policy, main condition, Wilson 95 % CIs; one panel per model."""
    data = rates[rates["arm"].isin(arms)]
    judges = sorted(data["judge"].unique())
    models = list(dict.fromkeys(data["model"]))
    fig, axes = _panels(models, max(6.4, 1.1 * len(judges)))
    for model, ax in axes.items():
        d = data[data["model"] == model]
        sns.barplot(data=d, x="judge", y="rate", hue="arm", order=judges, hue_order=arms, errorbar=None, ax=ax)
        plots.errorbars(ax, d, "judge", "arm", judges, arms)
        ax.set(ylim=(0, 1.05), ylabel="refusal rate", xlabel="judge", title=model)
        ax.set_xticks(range(len(judges)), [plots.two_lines(j) for j in judges])  # long names would run together
        ax.legend(title="retention", fontsize=7, title_fontsize=8)
    fig.suptitle("Refusal rate by judge and KV retention", y=1.02)
    plots.caption(fig, caption)
    return fig


def monitor_difference(conf: pd.DataFrame, caption: str):
    """The confirmatory claim: per model and family member, the monitor's and the reference judge's refusal
    drops (full - arm) and their difference, with 95 % paired bootstrap CIs; the band where the reference
    counts as holding (its drop shown below the declared margin); * = the claim (both halves) after Holm,
    + = the difference alone significant while the reference does not hold."""
    models = list(dict.fromkeys(conf["model"]))
    fig, axes = _panels(models, max(4.8, 1.3 * conf["family_member"].nunique()))
    parts = [("monitor_drop", f"{conf['monitor'].iloc[0]} drop"),
             ("reference_drop", f"{conf['reference'].iloc[0]} drop"), ("difference", "difference")]
    margin = float(conf["margin"].iloc[0]) if "margin" in conf else None
    for model, ax in axes.items():
        d = conf[conf["model"] == model].reset_index(drop=True)
        if margin is not None:
            ax.axhspan(-1.1, margin, color="tab:green", alpha=0.08, lw=0,
                       label=f"reference held: its drop shown below {margin:g}")
            ax.axhline(margin, color="tab:green", ls="--", lw=0.8)
        for k, (col, label) in enumerate(parts):
            x = d.index + (k - 1) * 0.22
            lo, hi = d[f"{col}_lo"], d[f"{col}_hi"]
            ax.errorbar(x, d[col], yerr=[d[col] - lo, hi - d[col]], fmt="o", capsize=3, label=label)
        for i, r in d.iterrows():
            mark = "*" if r.get("claimed", r["significant"]) else "+" if r["significant"] else ""
            if mark:
                ax.annotate(mark, (i + 0.22, r["difference_hi"]), ha="center", va="bottom", fontsize=12)
        ax.axhline(0, color="0.4", lw=0.8)
        ax.set_xticks(d.index, [m.replace("@", "\n@") for m in d["family_member"]])
        ax.set(ylim=(-1.1, 1.15), xlabel="arm @ filler tokens", ylabel="refusal drop (full - arm)", title=model)
        ax.legend(fontsize=7)
    fig.suptitle("The claim under eviction: the monitor falls (difference) and the reference holds (band)", y=1.02)
    plots.caption(fig, caption)
    return fig


def sink_dose_response(rates: pd.DataFrame, primary_sink: int, caption: str):
    """Refusal rate under sink_tail eviction as a function of the sink size, per judge (dashed: full);
    one panel per model."""
    tail = rates[rates["arm"].str.startswith("sink_tail")].copy()
    tail["sink_value"] = tail["arm"].str.extract(r"sink=(\d+)")[0].astype(float).fillna(primary_sink)
    palette = dict(zip(sorted(rates["judge"].unique()), sns.color_palette()))
    fig, axes = _panels(list(dict.fromkeys(rates["model"])), 5.2)
    for model, ax in axes.items():
        for judge, g in tail[tail["model"] == model].groupby("judge"):
            g = g.sort_values("sink_value")
            ax.errorbar(g["sink_value"], g["rate"], yerr=[g["rate"] - g["ci_lo"], g["ci_hi"] - g["rate"]],
                        marker="o", capsize=3, label=judge, color=palette[judge])
            full = rates[(rates["model"] == model) & (rates["judge"] == judge) & (rates["arm"] == "full")]["rate"]
            if not full.empty:
                ax.axhline(full.iloc[0], ls="--", lw=0.8, color=palette[judge])
        sinks = sorted(tail["sink_value"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(sinks, [f"{s:g}" for s in sinks])
        ax.minorticks_off()
        ax.set(ylim=(0, 1.05), xlabel="sink tokens kept", ylabel="refusal rate", title=model)
        ax.legend(fontsize=7)
    fig.suptitle("Sink dose-response (dashed: full retention)", y=1.02)
    plots.caption(fig, caption)
    return fig


def filler_ablation(rates: pd.DataFrame, caption: str):
    """Refusal rate by filler length, full vs primary eviction, one panel per judge."""
    data = rates[rates["arm"].isin(["full", "sink_tail"])]
    g = sns.FacetGrid(data, row="model", col="judge", hue="arm", hue_order=["full", "sink_tail"], height=2.8,
                      aspect=1.0, ylim=(0, 1.05))
    g.map_dataframe(lambda data, color, label: plt.errorbar(
        data["filler_tokens"], data["rate"], yerr=[data["rate"] - data["ci_lo"], data["ci_hi"] - data["rate"]],
        marker="o", capsize=3, color=color, label=label))
    g.set_axis_labels("filler tokens", "refusal rate").add_legend(title="retention")
    g.figure.suptitle("Filler-length ablation", y=1.03)
    plots.caption(g.figure, caption)
    return g.figure


def mmlu_accuracy(acc: pd.DataFrame, caption: str):
    """MMLU-math accuracy per model and retention policy, Wilson 95 % CIs."""
    order, models = list(dict.fromkeys(acc["arm"])), list(dict.fromkeys(acc["model"]))
    fig, ax = plt.subplots(figsize=(max(4.2, 2.2 * len(models)), 3.0))
    sns.barplot(data=acc, x="arm", y="rate", hue="model", order=order, hue_order=models, errorbar=None, ax=ax)
    plots.errorbars(ax, acc, "arm", "model", order, models)
    ax.legend(fontsize=7)
    ax.axhline(0.25, ls=":", color="0.4", lw=0.8)
    ax.set(ylim=(0, 1.05), xlabel="retention", ylabel="accuracy", title="MMLU-math under the same retention")
    plots.caption(fig, caption + " Dotted: chance (25 %).")
    return fig
