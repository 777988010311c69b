"""The confusion study's gates: how often each pair gate (cosine, Jaccard, safety) fires, which
pairs each one drops, and how well the gates and the safety score agree with the by-hand labels."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import stats
from .clusters import held_to_label


# --- gates ----------------------------------------------------------------------------------------------------
def gate_rates(items: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Pass rate of each gate (and of all three) over the paraphrases, overall and per dataset,
    with Wilson CIs. Seeds are the reference and are not counted."""
    para = items[items["member"] > 0].assign(gate_all=lambda d: d["gate_cosine"] & d["gate_jaccard"]
                                             & d["gate_safety"])
    parts = []
    for gate in ("gate_cosine", "gate_jaccard", "gate_safety", "gate_all"):
        for _, d in [("all", para.assign(_scope="all"))] + [(n, g.assign(_scope=n))
                                                                for n, g in para.groupby("dataset", sort=True)]:
            r = stats.rate_table(d.assign(passed=d[gate].astype(bool)), ["_scope"], "passed", alpha)
            parts.append(r.rename(columns={"_scope": "dataset"}).assign(gate=gate.removeprefix("gate_")))
    out = pd.concat(parts, ignore_index=True)
    return out[["gate", "dataset", "k", "n", "rate", "ci_lo", "ci_hi"]].rename(columns={"k": "passed"})


GATE_RULES = {"cosine": "gate_cosine", "jaccard": "gate_jaccard", "safety": "gate_safety",
              "near_duplicate": "gate_near_duplicate"}


def gate_drops(items: pd.DataFrame) -> pd.DataFrame:
    """Rows dropped per rule, over all clusters and per intended label. For the paraphrases (``n`` of
    them): ``dropped`` = failed the rule (a paraphrase may fail several), ``only`` = failed it alone;
    rule ``other`` = passed every rule but excluded (its cluster kept one member, or the paraphraser gave
    no text); ``any`` = excluded. Rule ``cluster``: the seeds (``n``) excluded because no paraphrase of
    theirs was left, i.e. the clusters excluded whole."""
    para = items[items["member"] > 0]
    failed = pd.DataFrame({r: ~para[c].astype(bool) for r, c in GATE_RULES.items()}, index=para.index)
    n_failed = failed.sum(axis=1).to_numpy()
    failed["other"] = ~para["included"].astype(bool) & (n_failed == 0)
    failed["any"] = ~para["included"].astype(bool)
    seeds = items[items["member"] == 0]
    rows = []
    for group in ["all"] + [g for g in ("safe", "unsafe") if (items["label"] == g).any()]:
        mask = np.ones(len(para), dtype=bool) if group == "all" else (para["label"] == group).to_numpy()
        for rule in failed:
            f = failed[rule].to_numpy() & mask
            only = f & (n_failed == 1) if rule in GATE_RULES else f
            rows.append({"rule": rule, "label": group, "n": int(mask.sum()), "dropped": int(f.sum()),
                         "only": int(only.sum())})
        s = seeds if group == "all" else seeds[seeds["label"] == group]
        gone = int((~s["included"].astype(bool)).sum())
        rows.append({"rule": "cluster", "label": group, "n": len(s), "dropped": gone, "only": gone})
    return pd.DataFrame(rows)


def gate_accuracy(items: pd.DataFrame, gates) -> pd.DataFrame:
    """The safety gate's validated accuracy and label error per class and held-out set
    (``safety.validated_accuracy`` at the run's threshold and margin), the floor ``min_accuracy``, what
    the class's clusters were held to (``gate``: label | seed), and on the ``worst`` rows the included
    paraphrases the gate held to that class (``n_admitted``), those of them whose intended label is the
    other class (``n_against_label``: held to a seed it misreads) and how many may carry a label the gate
    got wrong (``expected_wrong`` = n_admitted x label_error)."""
    from .safety import validated_accuracy  # lazy: keeps torch off this module

    out = validated_accuracy(gates.safety_threshold, gates.safety_margin)
    out["floor"] = gates.min_accuracy
    label = held_to_label(gates, out[out["held_out"] == "worst"].set_index("class")["accuracy"].to_dict())
    out["gate"] = np.where(out["class"].isin(label), "label", "seed")
    kept = items[(items["member"] > 0) & items["included"].astype(bool)]
    admitted = kept["gate_class"].value_counts()
    against = kept.loc[kept["label"].isin(["safe", "unsafe"]) & (kept["label"] != kept["gate_class"]),
                       "gate_class"].value_counts()
    is_worst = out["held_out"] == "worst"
    out["n_admitted"] = np.where(is_worst, out["class"].map(admitted).fillna(0), np.nan)
    out["n_against_label"] = np.where(is_worst, out["class"].map(against).fillna(0), np.nan)
    out["expected_wrong"] = out["n_admitted"] * out["label_error"]
    return out


def safety_accuracy(items: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Each safety classifier (and the ensemble) on the seeds, against their intended labels."""
    from .safety import CLASSIFIERS  # lazy: keeps torch off this module

    seeds = items[(items["member"] == 0) & items["label"].isin(["safe", "unsafe"])]
    rows = []
    for name in (*CLASSIFIERS, "ensemble"):
        col = f"safety_{name}" if name != "ensemble" else "safety_score"
        for dataset, d in [("all", seeds)] + list(seeds.groupby("dataset", sort=True)):
            right = (d[col] >= threshold) == (d["label"] == "unsafe")
            rows.append({"classifier": name, "dataset": dataset, "n_seeds": len(d), "accuracy": float(right.mean()),
                         "mean_p_unsafe": float(d[col].mean())})
    return pd.DataFrame(rows)
