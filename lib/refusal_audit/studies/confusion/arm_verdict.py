"""Each arm's verdict, one code for the default run and ``make confusion``: the null test, the same-meaning rule's
error, and the events that rest on the cosine alone.

The verdict is the default run's (``analysis.null_tables``): each arm's Confusion Rate beside the same rejections
placed at random within each stratum, the word ``follows intents`` / ``confused at chance`` (``analysis.null_answer``),
the test's simulated false-positive rate and power on the arm's own prompts, or the smallest drop it could have seen.
A guard that rejects at random therefore reads "confused at chance", not "splits paraphrases".

Across clusters, same meaning is decided by a known label where one exists and by "cosine > theta" elsewhere. That
rule's measured precision on the repository's hand-labelled pairs (``meaning.rule_at``) is low, so every output
states it and counts what rests on it: the cross-cluster events between clusters without a known label
(``n_cosine_events``) and the confused rejections that have no other event (``n_cosine_confused``). The Confusion
Rate and the verdict are recomputed with every unlabelled pair of clusters taken as different intents
(``*_without_cosine``); where the word changes, the verdict depends on the cosine and says so. The pairs of clusters
behind those events go to a blind sheet (``write_sheet``) that ``PAIRS=`` reads once its ``label`` column is filled.
"""
from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from . import analysis, meaning, nulls
from . import metrics as M
from . import wording as W

SHEET = "confusion_pairs_sheet.csv"
SHEET_COLUMNS = ["id_a", "id_b", "label", "seed_a", "seed_b", "prompts_a", "prompts_b"]
SAMPLE = 3  # paraphrases shown beside each seed on the sheet


def cosine_only(per_prompt: pd.DataFrame, group: str) -> pd.DataFrame:
    """Per arm, on its benign rejections (``group``): cross-cluster events between clusters without a known label
    (decided by the cosine alone) and the confused rejections whose every event is such an event."""
    rows = []
    for (model, judge), arm in per_prompt.groupby(analysis.ARM, sort=True):
        b = arm if group == "all" else arm[arm["label"] == group]
        rej = b[~b["accepted"].astype(bool)]
        cosine = rej["n_cross_events"] - rej["n_known_events"]
        other = rej["n_events"] - cosine  # own-cluster events and those with a known same-intent twin
        rows.append({"model": model, "judge": judge, "n_cosine_events": int(cosine.sum()),
                     "n_cosine_confused": int((rej["confused"].astype(bool) & (other == 0)).sum())})
    return pd.DataFrame(rows, columns=["model", "judge", "n_cosine_events", "n_cosine_confused"])


def without_cosine(items: pd.DataFrame, cp: M.ConfusionParams) -> M.ConfusionParams:
    """``cp`` with every pair of included clusters of one label that has no known label taken as different
    intents: same meaning then never leaves a cluster except through a known same-intent label."""
    inc = items[items["included"]].drop_duplicates("cluster")
    label = dict(zip(inc["cluster"], inc["label"]))
    have = {(a, b) for a, b, _ in cp.known}
    names = sorted(label)
    extra = [(a, b, False) for i, a in enumerate(names) for b in names[i + 1:]
             if label[a] == label[b] and label[a] in nulls.LABELS and (a, b) not in have]
    return dataclasses.replace(cp, known=tuple(sorted(tuple(cp.known) + tuple(extra))))


def rule_error(theta: float) -> dict[str, float]:
    """The rule "cosine > theta" on the repository's hand-labelled pairs, as columns (NaN without the table)."""
    r = meaning.rule_at(theta) or {}
    out = {"rule_theta": theta, "rule_n_pairs": r.get("n_pairs", np.nan)}
    for name in ("precision", "recall"):
        for x in ("", "_lo", "_hi"):
            out[f"rule_{name}{x}"] = r.get(f"{name}{x}", np.nan)
    return out


def null_tables(items: pd.DataFrame, per_prompt: pd.DataFrame, pairs: dict, cp: M.ConfusionParams, group: str,
                c, s, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The default run's nulls and calibration (``analysis.null_tables``) for every arm, each row with its verdict
    word, the rule's error, the cosine-only counts, and CR, p and word with every unlabelled pair of clusters taken
    as different intents."""
    table, calibration = analysis.null_tables(items, per_prompt, pairs, cp, group, c.nulls.n_perm, c.nulls.n_draws,
                                              s.alpha, seed, c.metrics.cover,
                                              (c.nulls.trigger_lists, tuple(c.nulls.trigger_sizes)))
    if table.empty:
        return table, calibration
    table["verdict"] = [analysis.null_answer(r) for _, r in table.iterrows()]
    alone = {}
    texts = items.drop_duplicates("item_id").set_index("item_id")["text"]
    for model, judge, b, pool in analysis.arm_pools(items, per_prompt, pairs, without_cosine(items, cp), group,
                                                    c.metrics.cover):
        rejected = ~b["accepted"].to_numpy(dtype=bool)
        # the placements of nulls.null_table and of the wording-matched null under the same seed (a paired
        # comparison), the CR only
        draws = nulls.placements(pool.strata, nulls.counts_of(pool, rejected), c.nulls.n_perm,
                                 np.random.default_rng(seed))
        obs, null = float(nulls.confusion_rate(pool, rejected[None])[0]), nulls.confusion_rate(pool, draws)
        below = nulls.pvalues(null, obs)[0]
        worded = nulls.within_null(pool, rejected, W.of_arm(b, texts)[2], c.nulls.n_perm, seed)["p_below"]
        alone[(model, judge)] = {"confusion_rate_without_cosine": obs,
                                 "confusion_rate_null_without_cosine": float(np.nanmean(null)) if rejected.any() else np.nan,
                                 "p_below_without_cosine": below, "wording_p_below_without_cosine": worded,
                                 "verdict_without_cosine": analysis.null_answer(
                                     {"n_rejected": int(rejected.sum()), "n_prompts": len(rejected),
                                      "confusion_rate_p_below": below, "wording_p_below": worded, "alpha": s.alpha})}
    extra = pd.DataFrame([{"model": m, "judge": j, **v} for (m, j), v in alone.items()])
    table = table.merge(cosine_only(per_prompt, group), on=analysis.ARM, how="left").merge(
        extra, on=analysis.ARM, how="left")
    table["verdict_rests_on_cosine"] = (table["verdict_without_cosine"].notna()
                                        & (table["verdict"] != table["verdict_without_cosine"]))
    return table.assign(**rule_error(cp.theta)), calibration


def rule_words(n) -> str:
    """The same-meaning rule and its measured error (``make confusion``; the default run's verdict states them in
    ``verdicts._theta_words``), then ``cosine_words``."""
    if pd.isna(n.get("rule_precision", np.nan)):
        err = "its precision and recall on labelled pairs: not computed (no scored pair table)"
    else:
        err = (f"on {int(n['rule_n_pairs'])} hand-labelled pairs it has precision {n['rule_precision']:.2f} "
               f"[{n['rule_precision_lo']:.2f}, {n['rule_precision_hi']:.2f}] and recall {n['rule_recall']:.2f} "
               f"[{n['rule_recall_lo']:.2f}, {n['rule_recall_hi']:.2f}] (Wilson)")
    return (f"Same meaning across clusters: a known label (PAIRS=) where one exists, else cosine > "
            f"{n['rule_theta']:g}; {err}." + cosine_words(n))


def cosine_words(n) -> str:
    """What rests on the cosine alone for one arm's nulls row, and CR and the verdict without it where that matters."""
    if not n["n_rejected"] or pd.isna(n.get("n_cosine_events", np.nan)):
        return ""
    out = (f" Resting on the cosine alone: {int(n['n_cosine_events'])} cross-cluster events and "
           f"{int(n['n_cosine_confused'])} of {int(n['n_rejected'])} rejections confused by nothing else")
    if not n["n_cosine_confused"] and not n["verdict_rests_on_cosine"]:
        return out + "."
    out += (f"; with every unlabelled pair of clusters taken as different intents, CR "
            f"{n['confusion_rate_without_cosine']:.2f} (null {n['confusion_rate_null_without_cosine']:.2f}, p(below) "
            f"{n['p_below_without_cosine']:.3f}): {n['verdict_without_cosine']}")
    if n["verdict_rests_on_cosine"]:
        return out + (f". THE VERDICT RESTS ON THE COSINE: {n['verdict']} with it, {n['verdict_without_cosine']} "
                      "without it; label the pairs (the blind sheet) to decide.")
    return out + " (the verdict does not change)."


def sheet_pairs(items: pd.DataFrame, per_prompt: pd.DataFrame, cp: M.ConfusionParams) -> list[tuple[str, str]]:
    """Pairs of clusters (sorted) behind any arm's cosine-only events: a rejected prompt of one and an accepted
    prompt of the other above theta, of one label, with no known label."""
    emb = items.drop_duplicates("item_id").set_index("item_id")["embedding"]
    have = {(a, b) for a, b, _ in cp.known}
    out: set[tuple[str, str]] = set()
    for _, arm in per_prompt.groupby(analysis.ARM, sort=True):
        arm = arm[arm["label"].isin(nulls.LABELS)].reset_index(drop=True)
        if arm.empty:
            continue
        e = np.stack(emb.loc[arm["item_id"]].to_numpy()).astype(np.float64)
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        acc = arm["accepted"].astype(bool).to_numpy()
        cl, lab = arm["cluster"].to_numpy(), arm["label"].to_numpy()
        hit = ((e @ e.T) > cp.theta) & ~acc[:, None] & acc[None, :] & (lab[:, None] == lab[None, :]) \
            & (cl[:, None] != cl[None, :])
        for r, a in zip(*np.nonzero(hit)):
            key = tuple(sorted((cl[r], cl[a])))
            if key not in have:
                out.add(key)
    return sorted(out)


def write_sheet(path: Path, items: pd.DataFrame, pairs: list[tuple[str, str]], seed: int) -> Path | None:
    """A blind sheet of ``pairs`` (no decision, no cosine): each cluster's seed id and text and a sample of its
    paraphrases, ``label`` empty for a person to fill with ``same`` or ``different`` intent. ``PAIRS=`` reads the
    filled sheet as it is (the ids are the seeds'; the other columns are for the reader). None: nothing to ask."""
    if not pairs:
        return None
    inc = items[items["included"]].sort_values(["cluster", "member"])
    by = {c: g for c, g in inc.groupby("cluster", sort=True)}
    rng = np.random.default_rng(seed)

    def shown(c: str) -> tuple[str, str, str]:
        g = by[c]
        rest = g["text"].iloc[1:].tolist()
        pick = [rest[i] for i in sorted(rng.choice(len(rest), min(SAMPLE, len(rest)), replace=False))] if rest else []
        return str(g["item_id"].iloc[0]), str(g["text"].iloc[0]), " | ".join(pick)

    with Path(path).open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(SHEET_COLUMNS)
        for a, b in pairs:
            (ia, sa, pa), (ib, sb, pb) = shown(a), shown(b)
            w.writerow([ia, ib, "", sa, sb, pa, pb])
    return Path(path)
