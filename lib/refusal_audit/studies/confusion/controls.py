"""The confusion study's planted arm and negative controls: a known answer the metrics must recover, and two
clusters of the run's own items on which no confusion may be counted (cross-cluster look-alikes and harmful twins)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from . import metrics as M
from .analysis import score_decisions, summary
from .neighbours import known_masks


# --- the planted control -----------------------------------------------------------------------------------
def planted_decisions(items: pd.DataFrame) -> pd.DataFrame:
    """Two decision sets with a known answer on the included prompts (model = ``planted``):

    * ``flip``: in every cluster the last included member is rejected, every other one accepted;
    * ``consistent``: clusters in sorted order, every other one rejected whole, the rest accepted whole.
    """
    inc = items[items["included"]]
    last = inc.groupby("cluster")["member"].transform("max")
    order = {c: i for i, c in enumerate(sorted(inc["cluster"].unique()))}
    flip = pd.DataFrame({"model": "planted", "judge": "flip", "item_id": inc["item_id"].values,
                         "accepted": (inc["member"] != last).values})
    consistent = pd.DataFrame({"model": "planted", "judge": "consistent", "item_id": inc["item_id"].values,
                               "accepted": (inc["cluster"].map(order) % 2 == 1).values})
    return pd.concat([flip, consistent], ignore_index=True)


def _known_dict(known) -> dict[frozenset, bool]:
    """{frozenset of two clusters: same} from (cluster a, cluster b, same) triples (the plain loops' lookup)."""
    return {frozenset((a, b)): bool(s) for a, b, s in known}


def _same_by_hand(r: int, j: int, cluster, label, sim, theta: float, known: dict) -> bool:
    """Same meaning of two prompts, written out: one cluster; else a known label of their two clusters; else the
    same intended label and cosine > theta."""
    if cluster[j] == cluster[r]:
        return True
    if label[j] != label[r] or label[r] not in ("safe", "unsafe"):
        return False
    pair = frozenset((cluster[j], cluster[r]))
    return known[pair] if pair in known else bool(sim[r, j] > theta)


def planted_expected(items: pd.DataFrame, theta: float, scope: str, depth_k: int, pairs: dict | None = None,
                     k: int = 5, weights=(1.0, 1.0, 1.0), known=()) -> pd.DataFrame:
    """The planted arms' answers, computed directly: the full n x n cosine matrix and plain loops over
    prompts (not through ``neighbours`` or ``metrics``), in ``scope`` with share depth; with ``pairs``
    ({(accepted id, rejected id): (drift, shift, contrast)}, the run's pair signals) also the CI: per
    rejection the k accepted prompts of its cluster or label nearest it, CS = the weighted mean of the
    pair's three signals, their mean (NaN when a pair lacks signals), averaged over the rejections."""
    inc = items[items["included"]].reset_index(drop=True)
    d = planted_decisions(inc)
    e = np.stack(inc["embedding"].to_numpy()).astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    sim = e @ e.T
    cluster = inc["cluster"].to_numpy()
    label = inc["label"].to_numpy() if "label" in inc else np.full(len(inc), "")
    ids, w = inc["item_id"].to_numpy(), np.asarray(weights, dtype=float)
    kd = _known_dict(known)
    rows = []
    for arm in ("flip", "consistent"):
        acc = d.loc[d["judge"] == arm, "accepted"].to_numpy(dtype=bool)
        confused, depths, cis = [], [], []
        for r in np.flatnonzero(~acc):
            others = [j for j in range(len(inc)) if j != r and (scope == "corpus" or cluster[j] == cluster[r])]
            confused.append(any(acc[j] and _same_by_hand(r, j, cluster, label, sim, theta, kd) for j in others))
            related = [j for j in others if cluster[j] == cluster[r] or (
                label[j] == label[r] and label[r] in ("safe", "unsafe"))]  # its cluster or its label
            ranked = sorted(related, key=lambda j: (-sim[r, j], j))[:depth_k]
            depths.append(np.mean([acc[j] for j in ranked]))
            near = sorted([j for j in related if acc[j]], key=lambda j: (-sim[r, j], j))[:k]
            if pairs is not None and near:
                cs = [float(np.dot(w, pairs[(ids[j], ids[r])]) / w.sum()) if (ids[j], ids[r]) in pairs else np.nan
                      for j in near]
                cis.append(np.mean(cs))
        rows += [(arm, "reject_rate", float(np.mean(~acc))), (arm, "confusion_rate", float(np.mean(confused))),
                 (arm, "depth", float(np.mean(depths)))]
        if pairs is not None:
            defined = [x for x in cis if not np.isnan(x)]
            rows.append((arm, "ci", float(np.mean(defined)) if defined else np.nan))
    return pd.DataFrame(rows, columns=["judge", "statistic", "expected"]).assign(scope=scope)


def planted(items: pd.DataFrame, pairs: dict | None, cp: M.ConfusionParams, n_boot: int, seed: int,
            alpha: float) -> pd.DataFrame:
    """The planted arms through the study's own scoring (``score_decisions`` and the bootstrap
    summaries, share depth) at both scopes, beside the answers computed directly. ``match``: equal to 1e-9."""

    parts = []
    for scope in M.SCOPES:
        sp = replace(cp, scope=scope, depth_method="share")
        _, clusters = score_decisions(items, planted_decisions(items), {"planted": pairs} if pairs else {}, sp)
        got = summary(clusters.assign(label="all"), n_boot, seed, alpha)
        exp = planted_expected(items, sp.theta, scope, sp.depth_k, pairs, sp.k, sp.weights, sp.known)
        parts.append(exp.merge(got[["judge", "statistic", "value", "ci_lo", "ci_hi"]], on=["judge", "statistic"],
                               how="left"))
    out = pd.concat(parts, ignore_index=True).rename(columns={"value": "recovered", "judge": "arm"})
    out["match"] = ((out["expected"] - out["recovered"]).abs() < 1e-9) | (out["expected"].isna()
                                                                          & out["recovered"].isna())
    return out[["scope", "arm", "statistic", "expected", "recovered", "ci_lo", "ci_hi", "match"]]


# --- the scope and harmful-twin controls ---------------------------------------------------------------------
CONTROLS = ("cross_cluster", "harmful_twin")  # each on two clusters of the run's own items, fixed by the rule below


CONTROL_STATISTICS = ("n_rejected", "n_confused", "n_cross_confused", "n_cross_events", "n_events_removed",
                      "n_known_events", "n_known_removed")


def _cosines(inc: pd.DataFrame) -> np.ndarray:
    """The full cosine matrix of the items' embeddings (the controls' corpus is a few hundred prompts)."""
    e = np.stack(inc["embedding"].to_numpy()).astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    return e @ e.T


def control_pairs(inc: pd.DataFrame, sim: np.ndarray, theta: float, known=()) -> dict[str, tuple[int, int] | None]:
    """The pair each control rests on, among the included items ``inc`` with cosines ``sim`` (row
    positions, the first one's cluster is rejected): ``cross_cluster``, the two prompts of different
    clusters and the same label (safe | unsafe) with the highest cosine above ``theta``; ``harmful_twin``,
    the unsafe and the safe prompt of different clusters with the highest cosine above ``theta`` (the
    unsafe one first); a pair of clusters with a known ``different`` label is never the cross-cluster one. None
    where the corpus has no such pair."""

    cluster, label = inc["cluster"].to_numpy(), inc["label"].to_numpy()
    other = (cluster[:, None] != cluster[None, :]) & (sim > theta)
    _, lookalikes = known_masks(cluster, known)
    labelled = np.isin(label, ("safe", "unsafe"))
    masks = {"cross_cluster": other & np.triu(np.ones_like(other), 1) & (label[:, None] == label[None, :])
             & labelled[:, None] & ~lookalikes,
             "harmful_twin": other & (label[:, None] == "unsafe") & (label[None, :] == "safe")}
    out = {}
    for name, mask in masks.items():
        if not mask.any():
            out[name] = None
            continue
        flat = np.flatnonzero(mask)
        best = flat[np.argmax(sim.ravel()[flat])]  # first of the highest (row-major order)
        out[name] = (int(best // len(inc)), int(best % len(inc)))
    return out


def _control_expected(sim: np.ndarray, accepted: np.ndarray, cluster: np.ndarray, label: np.ndarray, theta: float,
                      scope: str, known=()) -> dict[str, int]:
    """The controls' answers computed directly, with plain loops over the full cosine matrix (not through
    ``neighbours`` or ``metrics``): per rejected r, its events (accepted a in scope, same cluster, or same
    label and cosine > theta), those from other clusters, and the cross-cluster accepted prompts above theta
    that the label rule keeps out; with ``known`` labels, the events from a cluster labelled the same intent and
    the accepted prompts above theta of a cluster labelled a different one (kept out)."""
    counts = dict.fromkeys(CONTROL_STATISTICS, 0)
    kd = _known_dict(known)
    for r in np.flatnonzero(~accepted):
        events = cross = removed = 0
        for a in np.flatnonzero(accepted):
            if scope == "cluster" and cluster[a] != cluster[r]:
                continue
            same_label = label[a] == label[r] and label[r] in ("safe", "unsafe")
            if cluster[a] == cluster[r]:
                events += 1
                continue
            said = kd.get(frozenset((cluster[a], cluster[r]))) if same_label else None
            if said is not None:
                events, cross = events + said, cross + said
                counts["n_known_events"] += said
                counts["n_known_removed"] += (not said) and sim[r, a] > theta
            elif sim[r, a] > theta:
                events, cross, removed = events + same_label, cross + same_label, removed + (not same_label)
        counts["n_rejected"] += 1
        counts["n_confused"] += events > 0
        counts["n_cross_confused"] += cross > 0
        counts["n_cross_events"] += cross
        counts["n_events_removed"] += removed
    return counts


def controls(items: pd.DataFrame, cp: M.ConfusionParams) -> pd.DataFrame:
    """Two decision sets with a known answer, each on the two clusters of its pair (``control_pairs``),
    scored by the study's own code (``score_decisions``) at both scopes, beside the answer computed
    directly (``_control_expected``); ``match``: found equals expected.

    * ``cross_cluster``: the first prompt's cluster rejected whole, the other's accepted whole. Known answer:
      corpus scope finds the rejection whose only same-meaning accepted neighbours sit in the other cluster
      (n_confused >= 1, every event a cross-cluster one); cluster scope finds none (0).
    * ``harmful_twin``: the unsafe prompt's cluster rejected whole, its safe twin's cluster accepted whole.
      Known answer: no confusion event at either scope, although the twins are above theta
      (n_events_removed >= 1 at corpus scope: the label rule keeps them apart).
    A corpus without such a pair gives the control one row with ``available`` False."""

    inc = items[items["included"]].reset_index(drop=True)
    sim = _cosines(inc)
    rows = []
    for name, pair in control_pairs(inc, sim, cp.theta, cp.known).items():
        if pair is None:
            rows.append({"control": name, "available": False})
            continue
        rejected, accepted = inc["cluster"].iat[pair[0]], inc["cluster"].iat[pair[1]]
        part = inc[inc["cluster"].isin([rejected, accepted])].reset_index(drop=True)
        keep = inc["cluster"].isin([rejected, accepted]).to_numpy()
        acc = (part["cluster"] == accepted).to_numpy()
        decided = pd.DataFrame({"model": "control", "judge": name, "item_id": part["item_id"], "accepted": acc})
        for scope in M.SCOPES:
            scored, _ = score_decisions(part, decided, {}, replace(cp, scope=scope))
            rej = scored[~scored["accepted"].astype(bool)]
            found = {"n_rejected": len(rej), "n_confused": int(rej["confused"].sum()),
                     "n_cross_confused": int(rej["cross_confused"].sum()),
                     "n_cross_events": int(rej["n_cross_events"].sum()),
                     "n_events_removed": int(rej["n_events_removed"].sum()),
                     "n_known_events": int(rej["n_known_events"].sum()),
                     "n_known_removed": int(rej["n_known_removed"].sum())}
            expected = _control_expected(sim[np.ix_(keep, keep)], acc, part["cluster"].to_numpy(),
                                         part["label"].to_numpy(), cp.theta, scope, cp.known)
            rows += [{"control": name, "available": True, "scope": scope, "rejected_cluster": rejected,
                      "accepted_cluster": accepted, "pair_cosine": float(sim[pair]),
                      "statistic": stat, "expected": expected[stat], "found": found[stat],
                      "match": expected[stat] == found[stat]} for stat in CONTROL_STATISTICS]
    return pd.DataFrame(rows, columns=["control", "available", "scope", "rejected_cluster", "accepted_cluster",
                                       "pair_cosine", "statistic", "expected", "found", "match"])


def control_known(table: pd.DataFrame) -> dict[str, bool]:
    """Whether each available control's found values give its known answer (``controls``)."""
    out = {}
    for name, t in table[table["available"].astype(bool)].groupby("control", sort=False):
        v = t.set_index(["scope", "statistic"])["found"]
        if name == "cross_cluster":
            out[name] = bool(v[("corpus", "n_confused")] >= 1 and v[("corpus", "n_cross_confused")]
                             == v[("corpus", "n_confused")] and v[("cluster", "n_confused")] == 0)
        else:
            out[name] = bool(v[("corpus", "n_confused")] == 0 and v[("cluster", "n_confused")] == 0
                             and v[("corpus", "n_events_removed")] >= 1)
    return out
