"""The policy study's figures, drawn from its statistics tables (``stats/policy/*.csv``)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ...plots import caption

GROUP_COLOURS = {"policy-loaded": "#c0392b", "capability-loaded": "#2471a3"}


def range_vs_floor(sens: pd.DataFrame, text: str):
    """Delta_b (range across arms) against Phi_b (seed floor), one point per benchmark; the diagonal is
    Delta_b = Phi_b: below it, the arms differ no more than seeds of one recipe do."""
    fig, ax = plt.subplots(figsize=(6.2, 4.6))
    top = float(np.nanmax([sens["delta"].max(), sens["phi"].max(), 0.05])) * 1.08
    ax.plot([0, top], [0, top], color="0.6", lw=1, ls="--", label="$\\Delta_b = \\Phi_b$")
    for group, g in sens.groupby("group"):
        ax.scatter(g["phi"], g["delta"], s=36, color=GROUP_COLOURS.get(group, "0.3"), label=group, zorder=3)
    for _, r in sens.iterrows():
        ax.annotate(r["benchmark"], (r["phi"], r["delta"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xlim(-0.02, top)
    ax.set_ylim(-0.02, top)
    ax.set_xlabel("seed floor $\\Phi_b$ (largest range across seeds of one recipe)")
    ax.set_ylabel("label-supervision range $\\Delta_b$ (max - min across arms)")
    ax.set_title("Policy study: range across arms vs seed floor, per benchmark")
    ax.legend(fontsize=7, loc="lower right")
    caption(fig, text)
    return fig


def arms_heatmap(table: pd.DataFrame, text: str):
    """Arms (rows, with the two policies' own labels as reference rows) x benchmarks: share of clean
    prompts called unsafe, in points."""
    t = table.set_index("model").drop(columns="last_signal")
    labels = [f"{m}  [{s}]" for m, s in zip(table["model"], table["last_signal"])]
    fig, ax = plt.subplots(figsize=(1.0 + 0.62 * t.shape[1], 1.2 + 0.36 * t.shape[0]))
    sns.heatmap(t.astype(float), annot=True, fmt=".0f", cmap="rocket_r", vmin=0, vmax=100, cbar_kws={"label": "% called unsafe"},
                annot_kws={"fontsize": 6}, ax=ax, yticklabels=labels)
    ax.set_xlabel("benchmark (clean rows)")
    ax.set_ylabel("guard  [last supervision signal]")
    ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title("Policy study: arms x benchmarks (catch rate / over-refusal, points)")
    caption(fig, text)
    return fig


def validation_vs_agreement(val: pd.DataFrame, rho: pd.DataFrame, text: str):
    """Validation accuracy (policy A's labels) against policy agreement and against capability, one
    point per arm, with Spearman's rho."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.9), sharey=True)
    colours = {"a": "#c0392b", "b": "#2471a3", "mixed": "#7d3c98"}
    for ax, y, title in ((axes[0], "policy_agreement", "policy agreement (policy-loaded benchmarks)"),
                         (axes[1], "capability", "capability (capability-loaded benchmarks)")):
        for last, g in val.groupby("last_signal"):
            ax.scatter(g[y], g["val_acc_a"], s=30, color=colours.get(last, "0.3"), label=f"last signal {last}")
        for _, r in val.iterrows():
            ax.annotate(r["model"], (r[y], r["val_acc_a"]), fontsize=5.5, xytext=(2, 2), textcoords="offset points")
        row = rho[(rho["x"] == "val_acc_a") & (rho["y"] == y)]
        r = row["rho"].iloc[0] if len(row) else float("nan")
        ax.set_title(f"{title}\nSpearman rho = {r:+.2f} (n = {len(val)})", fontsize=8)
        ax.set_xlabel(f"{y.replace('_', ' ')} (binary agreement with A)")
    axes[0].set_ylabel("validation accuracy (4-class, policy A labels)")
    axes[0].legend(fontsize=6)
    fig.suptitle("Policy study: what validation accuracy tracks", fontsize=9)
    fig.subplots_adjust(top=0.80)
    caption(fig, text)
    return fig


def guard_position(table: pd.DataFrame, text: str, margin: float = 0.05):
    """The verdict's own statistic: each guard's position per direction (A-stricter, B-stricter; 0 =
    as B labels the items, 1 = as A does, between its own rates on the undisputed items of the same
    groups) with its interval, the band 0.5 +- ``margin`` a side must clear, and the verdict beside
    it: the trained arms at the run seed (coloured by last supervision signal), then every other
    guard (released, synthetic, the user's). A direction without a position is marked so."""
    colours = {"a": "#c0392b", "b": "#2471a3", "mixed": "#7d3c98"}
    t = table[~table["guard"].str.contains("|", regex=False)].reset_index(drop=True)
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 1.4 + 0.28 * len(t)), sharey=True)
    names = {"a_stricter": "A-stricter items (A unsafe, B safe)", "b_stricter": "B-stricter items (B unsafe, A safe)"}
    lo_all = min([-0.3] + [float(np.nanmin(t[f"pos_{d}_lo"])) for d in names if t[f"pos_{d}_lo"].notna().any()])
    hi_all = max([1.3] + [float(np.nanmax(t[f"pos_{d}_hi"])) for d in names if t[f"pos_{d}_hi"].notna().any()])
    lo_all, hi_all = max(lo_all, -1.5), min(hi_all, 2.5)
    for ax, (d, title) in zip(axes, names.items()):
        ax.axvspan(0.5 - margin, 0.5 + margin, color="0.85", lw=0)
        for x in (0, 1):
            ax.axvline(x, color="0.6", lw=0.7, ls=":")
        for i, r in t.iterrows():
            c = colours.get(str(r["last_signal"]).replace("known: ", ""), "0.2")
            pos, lo, hi = r[f"pos_{d}"], r[f"pos_{d}_lo"], r[f"pos_{d}_hi"]
            if not np.isfinite(pos):
                ax.text(0.5, i, "no position" if r[f"n_{d}"] else "no items", ha="center", va="center",
                        fontsize=6, color=c)
                continue
            ax.errorbar(np.clip(pos, lo_all, hi_all), i,
                        xerr=[[max(np.clip(pos, lo_all, hi_all) - max(lo, lo_all), 0)],
                              [max(min(hi, hi_all) - np.clip(pos, lo_all, hi_all), 0)]],
                        fmt="o" if r["kind"] == "arm" else "D", color=c, ms=4, capsize=2)
            ax.text(hi_all, i, f" {r[f'side_{d}']}", va="center", fontsize=6, color=c)
        ax.set_xlim(lo_all, hi_all)
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("position toward A (0 = as B labels them, 1 = as A)", fontsize=7)
    axes[0].set_yticks(range(len(t)))
    axes[0].set_yticklabels([f"{g} [{s}] -> {f}" for g, s, f in zip(t["guard"], t["last_signal"], t["follows"])],
                            fontsize=6.5)
    axes[0].invert_yaxis()
    fig.suptitle(f"Policy study: which policy each guard follows (grey band: 0.5 +- {margin}; a side needs the "
                 "interval beyond it in every direction)", fontsize=8.5)
    caption(fig, text)
    return fig
