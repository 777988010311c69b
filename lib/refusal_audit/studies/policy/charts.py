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


def guard_position(table: pd.DataFrame, text: str):
    """Agreement with policy A on the disputed items (Wilson CI), one row per guard: the trained arms
    at the run seed (coloured by last supervision signal), with the seed floor drawn around each,
    then every other guard (released, synthetic, the user's) with its ``follows`` verdict."""
    colours = {"a": "#c0392b", "b": "#2471a3", "mixed": "#7d3c98"}
    t = table[~table["guard"].str.contains("|", regex=False)].reset_index(drop=True)
    floor = float(t["seed_floor"].iloc[0]) if "seed_floor" in t and len(t) else float("nan")
    fig, ax = plt.subplots(figsize=(7.0, 1.2 + 0.28 * len(t)))
    for i, r in t.iterrows():
        c = colours.get(r["last_signal"], "0.2")
        arm = r["kind"] == "arm"
        if arm and not np.isnan(floor):
            ax.barh(i, 2 * floor, left=r["agree_a"] - floor, height=0.6, color=c, alpha=0.12, lw=0)
        ax.errorbar(r["agree_a"], i, xerr=[[r["agree_a"] - r["agree_a_lo"]], [r["agree_a_hi"] - r["agree_a"]]],
                    fmt="o" if arm else "D", color=c, ms=5, capsize=2)
    ax.set_yticks(range(len(t)))
    ax.set_yticklabels([f"{g}  [{s}] -> {f}" for g, s, f in zip(t["guard"], t["last_signal"], t["follows"])],
                       fontsize=6.5)
    ax.invert_yaxis()
    ax.axvline(0.5, color="0.7", lw=0.8, ls=":")
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("agreement with policy A on the disputed items (1 = A's labels, 0 = B's)")
    ax.set_title("Policy study: which policy each guard follows", fontsize=9)
    caption(fig, text)
    return fig
