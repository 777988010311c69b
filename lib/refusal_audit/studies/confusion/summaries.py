"""Confusion metrics summarised: per cluster (the ratio of sums a cluster's prompts give) and per model
(each cluster weighted by its rejected prompts), from the table metrics.score returns."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .metrics import SIGNALS


def _nanmean(values: pd.Series) -> float:
    values = values.dropna()
    return float(values.mean()) if len(values) else float("nan")


def cluster_summary(scored: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, cluster) from ``score`` output: counts, frr, confusion_rate, and the
    means of ci, drift, shift, contrast (over rejected prompts with a defined CI; n_ci of them)
    and depth (n_depth). A bootstrap over intents resamples these rows and calls ``model_summary``."""
    keys = ["model", "cluster"] if "model" in scored.columns else ["cluster"]
    rows = []
    for key, g in scored.groupby(keys, sort=True, dropna=False):
        rej = g[~g["accepted"].astype(bool)]
        n_rejected, n_confused = len(rej), int(rej["confused"].sum())
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row.update({"n_prompts": len(g), "n_accepted": len(g) - n_rejected, "n_rejected": n_rejected,
                    "frr": n_rejected / len(g), "n_confused": n_confused,
                    "confusion_rate": n_confused / n_rejected if n_rejected else 0.0,
                    "n_cross_confused": int(rej["cross_confused"].sum()),
                    "n_events": int(rej["n_events"].sum()), "n_cross_events": int(rej["n_cross_events"].sum()),
                    "n_known_events": int(rej["n_known_events"].sum()),
                    "n_known_removed": int(rej["n_known_removed"].sum()),
                    "n_known_confused": int((rej["n_known_events"] > 0).sum()),
                    "n_neighbours_removed": int(rej["n_neighbours_removed"].sum()),
                    "n_events_removed": int(rej["n_events_removed"].sum()),
                    "n_uncovered": int(rej["n_uncovered"].sum()),
                    "n_ci": int(rej["ci"].notna().sum())})
        row.update({c: _nanmean(rej[c]) for c in ("ci", *SIGNALS)})
        row.update({"n_ci_events": int(rej["ci_events"].notna().sum()), "ci_events": _nanmean(rej["ci_events"])})
        row.update({"n_depth": int(rej["depth"].notna().sum()), "depth": _nanmean(rej["depth"])})
        rows.append(row)
    return pd.DataFrame(rows)


def _weighted(values: pd.Series, counts: pd.Series) -> float:
    keep = counts > 0
    return float(np.average(values[keep], weights=counts[keep])) if keep.any() else float("nan")


def model_summary(clusters: pd.DataFrame) -> pd.DataFrame:
    """One row per model from ``cluster_summary`` rows: pooled over prompts (ratios of sums and
    count-weighted means), plus the share of clusters with at least one confusion."""
    groups = clusters.groupby("model", sort=True) if "model" in clusters.columns else [(None, clusters)]
    rows = []
    for model, g in groups:
        n_rejected = int(g["n_rejected"].sum())
        row = {} if model is None else {"model": model}
        row.update({"n_clusters": len(g), "n_prompts": int(g["n_prompts"].sum()), "n_rejected": n_rejected,
                    "frr": n_rejected / int(g["n_prompts"].sum()), "n_confused": int(g["n_confused"].sum()),
                    "confusion_rate": int(g["n_confused"].sum()) / n_rejected if n_rejected else 0.0,
                    "clusters_confused": float(np.mean(g["n_confused"] > 0)), "n_ci": int(g["n_ci"].sum())})
        row.update({c: int(g[c].sum()) for c in ("n_cross_confused", "n_events", "n_cross_events", "n_known_events",
                                                 "n_known_removed", "n_known_confused", "n_neighbours_removed",
                                                 "n_events_removed", "n_uncovered") if c in g})
        row.update({c: _weighted(g[c], g["n_ci"]) for c in ("ci", *SIGNALS)})
        if "ci_events" in g:
            row["ci_events"] = _weighted(g["ci_events"], g["n_ci_events"])
        row["depth"] = _weighted(g["depth"], g["n_depth"])
        rows.append(row)
    return pd.DataFrame(rows)
