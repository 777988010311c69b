"""Plotting helpers every study's figures use (seaborn / matplotlib); every figure is saved as PNG and PDF.
The figures themselves belong to the studies (``studies/<name>/charts.py``)."""
from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pandas as pd
import seaborn as sns

sns.set_theme(style="whitegrid", context="paper")


def save(fig, name: str, folders: list[Path]) -> list[Path]:
    """Write ``name``.png and ``name``.pdf into the first folder (rendered once each) and copy them into
    every other folder."""
    paths = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for ext in ("png", "pdf"):
            path = folder / f"{name}.{ext}"
            if folder != folders[0]:
                shutil.copyfile(folders[0] / path.name, path)
            else:
                fig.savefig(path, dpi=150, bbox_inches="tight",
                            metadata={"CreationDate": None} if ext == "pdf" else None)
            paths.append(path)
    return paths


def two_lines(name: str, width: int = 12) -> str:
    """A long identifier broken after the underscore nearest its middle, for a tick label."""
    cuts = [i for i, c in enumerate(name) if c == "_"]
    if len(name) <= width or not cuts:
        return name
    cut = min(cuts, key=lambda i: abs(i - len(name) / 2))
    return name[: cut + 1] + "\n" + name[cut + 1:]


def caption(fig, text: str) -> None:
    """A small grey caption under everything already drawn (what was measured, on what, with which
    intervals): placed below the figure's tight bounding box, so it never covers tick labels."""
    fig.canvas.draw()
    bottom = fig.get_tightbbox(fig.canvas.get_renderer()).y0 / fig.get_figheight()
    # wrapped here, to the figure's width at 7 pt (~0.6 em a character), not by matplotlib's wrap=True,
    # which re-measures the text at every draw (a third of the figures' time)
    width = max(40, int(fig.get_figwidth() * 72 * 0.98 / (7 * 0.6)))
    fig.text(0.01, min(bottom, 0.0) - 0.02, textwrap.fill(text, width), ha="left", va="top", fontsize=7,
             color="0.3")


def errorbars(ax, data: pd.DataFrame, x: str, hue: str, order: list, hue_order: list) -> None:
    """Wilson CI whiskers on a seaborn barplot drawn with the same order/hue_order."""
    for container, h in zip(ax.containers, hue_order):
        for bar, xv in zip(container, order):
            row = data[(data[x] == xv) & (data[hue] == h)]
            if row.empty:
                continue
            cx = bar.get_x() + bar.get_width() / 2
            ax.plot([cx, cx], [row["ci_lo"].iloc[0], row["ci_hi"].iloc[0]], color="0.15", lw=1)
