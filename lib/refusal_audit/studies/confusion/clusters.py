"""Paraphrase clusters: reading them (the repository's file, a user's CSV, or seeds for the LLM
paraphraser), checking them before any work, and the gates every paraphrase must pass.

A cluster is one intent: its seed (``member`` 0; for a user's CSV, the cluster's first row) and its
paraphrases. Gates, each against the cluster's seed (thresholds in params, ``confusion.gates``):

* **cosine**: sim(paraphrase, seed) >= tau, sim = cosine of the shared encoder's unit-norm
  embeddings (``refusal_audit.encoder.embed``, all-MiniLM-L6-v2): the meaning is kept;
* **jaccard**: token Jaccard distance to the seed >= delta, tokens = ``set(re.findall(r"\\w+",
  text.lower()))``, distance = 1 - |A & B| / |A | B| (compared with a 1e-12 tolerance, so that
  1 - 4/5 counts as 0.2): the surface changed;
* **safety**: the safety ensemble (``safety.py``) does not read the paraphrase decisively on the
  other side of its cluster's intended label (safe | unsafe; ``safety_against: label``, the default):
  held to safe, the paraphrase fails when P(unsafe) >= t + m; held to unsafe, when P(unsafe) < t - m
  (t = ``safety_threshold``, m = ``safety_margin``; m = 0 is plain equality). A class whose validated
  accuracy (``safety.validated_accuracy``) is below ``min_accuracy``, an unlabelled cluster, or
  ``safety_against: seed`` hold the paraphrase to its seed's read instead (``gate_side`` says which).
  The margin exists because the classifiers move by a few hundredths with the form of a request (a
  question reads safer than an imperative).
* **near-duplicate**: a paraphrase that passed the three gates and is a near-duplicate of an earlier
  member of its cluster (the contamination audit's normalised match, or Jaccard of its character
  3-gram shingles >= ``near_duplicate``, default 0.9) collapses into it (``near_duplicates``).

A paraphrase that fails a gate stays in the items table with ``included`` False and a
``gate_reason`` naming every gate it failed and by how much; nothing is dropped silently. A cluster
left with fewer than two members after the gates is excluded whole, with that reason.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from ... import datasets
from ...config import ParamsError
from ...contamination import normalise, shingles
from ...paths import DATA_DIR

FILE_COLUMNS = ["cluster_id", "member", "rule", "prompt", "label", "dataset", "source_file", "source_row",
                "source_type", "licence"]
LABELS = ("safe", "unsafe")
_TOKEN = re.compile(r"\w+")
JACCARD_TOLERANCE = 1e-12


class SeedSet(NamedTuple):
    """A public set the paraphraser's seeds can be drawn from: its file, text column, row filter
    (column, value), intended label, category column, licence, id column (None: the file row) and the
    short code in its cluster ids (``cf-<short>-<id>``). ``path`` None: clusters written in the cluster file
    itself (no public set to draw seeds from)."""

    path: Path | None
    text: str
    keep: tuple[str, str] | None
    label: str
    category: str | None
    licence: str
    key: str | None
    short: str


SEED_SETS = {
    # benign look-alikes (the paper's kind: over-refusal seeds)
    "xstest": SeedSet(datasets.XSTEST, "prompt", ("label", "safe"), "safe", "type", "CC-BY-4.0", "id", "xs"),
    "jailbreakbench_benign": SeedSet(datasets.JBB_BENIGN, "goal", None, "safe", "category", "MIT", "index", "jb"),
    # harmful contrasts
    "xstest_unsafe": SeedSet(datasets.XSTEST, "prompt", ("label", "unsafe"), "unsafe", "type", "CC-BY-4.0", "id",
                             "xu"),
    "harmbench": SeedSet(datasets.HARMBENCH_ALL, "Behavior", ("FunctionalCategory", "standard"), "unsafe",
                         "SemanticCategory", "MIT", "BehaviorID", "hb"),
    "jailbreakbench_harmful": SeedSet(datasets.JBB_HARMFUL, "Goal", None, "unsafe", "Category", "MIT", None, "jh"),
    "advbench": SeedSet(datasets.ADVBENCH, "goal", None, "unsafe", None, "MIT", None, "ab"),
    "strongreject": SeedSet(datasets.STRONGREJECT, "forbidden_prompt", None, "unsafe", "category", "MIT", None, "sr"),
    # written for this repository in data/confusion/clusters.csv: benign same-intent twins and different-intent
    # look-alikes of other benign clusters (data/confusion/SOURCE.md; their labels in known_pairs.csv)
    "handwritten_benign": SeedSet(None, "prompt", None, "safe", "source_type", "MIT", None, "hw"),
}


# --- reading ----------------------------------------------------------------------------------------
def check_members(df: pd.DataFrame, where: str, cluster: str = "cluster_id", row_offset: int = 0) -> None:
    """Every cluster has at least two members (a paraphrase contrast needs two phrasings); an empty
    cluster id or prompt is an error. Errors name ``where``, the row and the cluster."""
    for column in (cluster, "prompt"):
        empty = df[column].astype(str).str.strip() == ""
        if empty.any():
            i = int(np.flatnonzero(empty.to_numpy())[0])
            raise ValueError(f"{where}: row {i + row_offset}: empty {column}; expected non-empty text")
    sizes = df.groupby(cluster, sort=False).size()
    small = sizes[sizes < 2]
    if len(small):
        name = small.index[0]
        row = int(np.flatnonzero((df[cluster] == name).to_numpy())[0]) + row_offset
        raise ValueError(f"{where}: row {row}: cluster {name!r} has {int(small.iloc[0])} member; a cluster needs at "
                         f"least two phrasings of its intent ({len(small)} such cluster(s): "
                         f"{', '.join(map(repr, small.index[:5]))})")


def read_file(path: Path) -> pd.DataFrame:
    """The repository's cluster file, checked: columns, members (0 = seed, once per cluster), labels."""
    df = pd.read_csv(datasets.require(path), dtype=str, keep_default_na=False)
    where = str(path)
    missing = [c for c in FILE_COLUMNS if c not in df]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing}; expected {', '.join(FILE_COLUMNS)}")
    check_members(df, where)
    bad = ~df["member"].str.fullmatch(r"\d+")
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"{where}: row {i}: member {df['member'].iat[i]!r}; expected an integer (0 = the seed)")
    df["member"] = df["member"].astype(int)
    seeds = df[df["member"] == 0].groupby("cluster_id").size().reindex(df["cluster_id"].unique(), fill_value=0)
    if (seeds != 1).any():
        name = seeds.index[(seeds != 1).to_numpy()][0]
        raise ValueError(f"{where}: cluster {name!r} has {int(seeds[name])} seed rows (member 0); expected exactly one")
    dup = df.duplicated(["cluster_id", "member"])
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise ValueError(f"{where}: row {i}: cluster {df['cluster_id'].iat[i]!r} member {df['member'].iat[i]} "
                         "appears twice")
    bad = ~df["label"].isin(LABELS)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"{where}: row {i}: label {df['label'].iat[i]!r}; expected one of {LABELS}")
    return df


def select(df: pd.DataFrame, per_dataset: dict[str, int], k: int, seed: int, where: str) -> pd.DataFrame:
    """``per_dataset[d]`` clusters of each dataset (all of them when the number equals the count;
    otherwise drawn under ``seed``), each with its seed and members 1..k; file order kept."""
    picked = []
    for name, n in per_dataset.items():
        ids = pd.Series(df.loc[df["dataset"] == name, "cluster_id"].unique())
        if n > len(ids):
            raise ParamsError(f"{where}: confusion.data.clusters.{name}: asked for {n} clusters, "
                              f"the file has {len(ids)}")
        picked += ids.sample(n, random_state=seed).tolist() if n < len(ids) else ids.tolist()
    out = df[df["cluster_id"].isin(picked) & (df["member"] <= k)]
    short = out.groupby("cluster_id").size()
    short = short[short < k + 1]
    if len(short):
        raise ParamsError(f"{where}: confusion.data.k: {k} paraphrases asked, cluster {short.index[0]!r} has "
                          f"{short.iloc[0] - 1}")
    return out.reset_index(drop=True)


def seed_pool(name: str, earlier: set[str]) -> pd.DataFrame:
    """The rows of seed set ``name`` that can be seeds, with their text normalised as the contamination
    audit does (column ``normalised``): its filter applied, and every row whose normalised text is in
    ``earlier`` dropped, so that one request is never the seed of two clusters (JailbreakBench's harmful
    behaviours repeat 9 of HarmBench's)."""

    s = SEED_SETS[name]
    raw = datasets.read(s.path)
    if s.keep:
        raw = raw[raw[s.keep[0]] == s.keep[1]]
    raw = raw.assign(normalised=raw[s.text].astype(str).map(normalise))
    return raw[~raw["normalised"].isin(earlier)]


def seeds_from_sets(per_dataset: dict[str, int], seed: int) -> pd.DataFrame:
    """Seed rows (member 0) drawn under ``seed`` from the public sets, for the LLM paraphraser: each set
    in the order given, less the requests of the sets before it (``seed_pool``)."""
    parts, earlier = [], set()
    for name, n in per_dataset.items():
        s = SEED_SETS[name]
        if s.path is None:
            raise ValueError(f"confusion.data.clusters.{name}: written in the cluster file only (no public set to "
                             "draw seeds from); use confusion.data.source: file")
        raw = seed_pool(name, earlier)
        if n > len(raw):
            raise ValueError(f"{s.path.name}: asked for {n} {name} seeds, the set has {len(raw)} (after its filter and "
                             "without the requests of the sets listed before it)")
        earlier |= set(raw["normalised"])
        pick = raw.sample(n, random_state=seed).sort_values("source_row")
        key = pick[s.key] if s.key else pick["source_row"]
        parts.append(pd.DataFrame({
            "cluster_id": [f"cf-{s.short}-{v}" for v in key], "member": 0, "rule": "seed",
            "prompt": pick[s.text].values, "label": s.label, "dataset": name,
            "source_file": s.path.relative_to(DATA_DIR).as_posix(), "source_row": pick["source_row"].values,
            "source_type": pick[s.category].values if s.category else "", "licence": s.licence}))
    return pd.concat(parts, ignore_index=True)


def read_user(path: str | Path) -> pd.DataFrame:
    """A user's cluster CSV (``cluster_id``, ``prompt``, optional ``id`` and ``label``), checked before
    any work, with the same errors as ``make generate`` (file, UTF-8, columns, duplicate ids, empty
    prompts) and more: every cluster needs at least two members; with a ``label`` column every row
    carries safe or unsafe, one per cluster. The first row of a cluster is its seed. Without labels,
    same meaning never leaves a cluster (no cross-cluster events; DEFINITIONS.md)."""
    df = datasets.read_user_csv(path, ["cluster_id", "prompt"], ["id", "label"], "clusters")
    where = str(path)
    labels = df["label"].str.strip() if "label" in df else pd.Series([""] * len(df))
    if "label" in df:
        bad = ~labels.isin(LABELS)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"{where}: row {i}: label {df['label'].iat[i]!r}; expected one of {LABELS} on every "
                             "row (or no label column: then no cross-cluster events)")
        mixed = labels.groupby(df["cluster_id"]).nunique()
        if (mixed > 1).any():
            raise ValueError(f"{where}: cluster {mixed[mixed > 1].index[0]!r}: rows carry both labels; expected one "
                             "intended label per cluster")
    ids = df["id"] if "id" in df else pd.Series([f"row-{i:05d}" for i in range(len(df))])
    if (ids.astype(str).str.strip() == "").any():
        i = int(np.flatnonzero((ids.astype(str).str.strip() == "").to_numpy())[0])
        raise ValueError(f"{where}: row {i}: empty id; expected a non-empty id on every row")
    check_members(df, where)
    member = df.groupby("cluster_id", sort=False).cumcount()
    return pd.DataFrame({
        "cluster_id": df["cluster_id"].values, "member": member.values,
        "rule": np.where(member == 0, "seed", "user"), "prompt": df["prompt"].values, "label": labels.values,
        "dataset": Path(path).name, "source_file": str(path), "source_row": range(len(df)),
        "source_type": "", "licence": "user-supplied", "id": ids.astype(str).values})


# --- gates --------------------------------------------------------------------------------------------
def tokens(text: str) -> set[str]:
    return set(_TOKEN.findall(text.lower()))


def jaccard_distance(a: str, b: str) -> float:
    """1 - |A & B| / |A | B| over lower-cased \\w+ tokens (0 for two texts without tokens)."""
    x, y = tokens(a), tokens(b)
    union = x | y
    return 1.0 - len(x & y) / len(union) if union else 0.0


def seed_index(rows: pd.DataFrame) -> np.ndarray:
    """For each row, the position of its cluster's seed (member 0)."""
    seeds = {c: i for i, (c, m) in enumerate(zip(rows["cluster_id"], rows["member"])) if m == 0}
    return np.array([seeds[c] for c in rows["cluster_id"]])


def near_duplicates(rows: pd.DataFrame, candidates: np.ndarray, threshold: float) -> list[str]:
    """Within each cluster, in member order (the seed first), each candidate row that is a near-duplicate
    of an earlier kept candidate of its cluster collapses into it: equal after the contamination audit's
    ``normalise``, or Jaccard of their shingle sets (``contamination.shingles``: character 3-grams of the
    normal form) >= ``threshold``. Returns per row "" or the reason it collapsed."""

    why = [""] * len(rows)
    kept: dict[str, list[tuple[int, str, set[str]]]] = {}
    for i in np.argsort(rows["member"].to_numpy(), kind="stable"):
        if not candidates[i]:
            continue
        text = rows["prompt"].iat[i]
        own, normal = shingles(text), normalise(text)
        earlier = kept.setdefault(rows["cluster_id"].iat[i], [])
        for member, other_normal, other in earlier:
            j = len(own & other) / len(own | other)
            if normal == other_normal or j >= threshold - JACCARD_TOLERANCE:
                why[i] = f"near-duplicate of member {member} (shingle Jaccard {j:.2f} >= {threshold:g})"
                break
        else:
            earlier.append((int(rows["member"].iat[i]), normal, own))
    return why


def held_to_label(gates, accuracy: dict[str, float] | None) -> list[str]:
    """The classes whose paraphrases the safety gate holds to the intended label: none under
    ``safety_against: seed``; otherwise those validated at or above ``gates.min_accuracy`` (all when
    ``accuracy`` is None)."""
    if gates.safety_against != "label":
        return []
    return [c for c in LABELS if accuracy is None or accuracy[c] >= gates.min_accuracy]


def apply_gates(rows: pd.DataFrame, embeddings: np.ndarray, safety_scores: np.ndarray, gates,
                accuracy: dict[str, float] | None = None) -> pd.DataFrame:
    """The gates for every paraphrase against its seed, then the near-duplicate collapse. ``embeddings``:
    unit-norm, one per row; ``safety_scores``: the ensemble's P(unsafe) per row; ``accuracy``: the
    safety gate's validated accuracy per class (``safety.validated_accuracy``; None: every class
    trusted). Under ``safety_against: label`` a class validated below ``gates.min_accuracy`` is held to
    its seed's read instead. Adds cos_to_seed, jaccard_to_seed, safety_score, seed_safety_score,
    gate_side (label | seed: what the safety gate held the row to), gate_class (the side: safe |
    unsafe), gate_cosine, gate_jaccard, gate_safety, gate_near_duplicate, included, gate_reason."""
    out = rows.reset_index(drop=True).copy()
    s = seed_index(out)
    out["cos_to_seed"] = np.einsum("ij,ij->i", embeddings, embeddings[s]).astype(float)
    out["jaccard_to_seed"] = [jaccard_distance(t, out["prompt"].iat[j]) for t, j in zip(out["prompt"], s)]
    out["safety_score"] = np.asarray(safety_scores, dtype=float)
    out["seed_safety_score"] = out["safety_score"].to_numpy()[s]
    t, m = gates.safety_threshold, gates.safety_margin
    side = (out["seed_safety_score"] >= t).to_numpy()  # the side to stay on: unsafe = True
    labelled = np.zeros(len(out), dtype=bool)
    if gates.safety_against == "label" and "label" in out:
        intended = out["label"].to_numpy()[s]
        labelled = np.isin(intended, held_to_label(gates, accuracy))
        side = np.where(labelled, intended == "unsafe", side)
    out["gate_side"] = np.where(labelled, "label", "seed")
    out["gate_class"] = np.where(side, "unsafe", "safe")
    changed = np.where(side, out["safety_score"] < t - m, out["safety_score"] >= t + m)
    seed = out["member"] == 0
    out["gate_cosine"] = seed | (out["cos_to_seed"] >= gates.tau)
    out["gate_jaccard"] = seed | (out["jaccard_to_seed"] >= gates.delta - JACCARD_TOLERANCE)
    out["gate_safety"] = seed | (not gates.safety) | ~changed
    duplicate = near_duplicates(out, (out["gate_cosine"] & out["gate_jaccard"] & out["gate_safety"]).to_numpy(),
                                gates.near_duplicate)
    out["gate_near_duplicate"] = [d == "" for d in duplicate]
    reasons = []
    for i, (_, r) in enumerate(out.iterrows()):
        why = [r["paraphraser_note"]] if r.get("paraphraser_note") else []
        if not r["gate_cosine"]:
            why.append(f"cosine to seed {r['cos_to_seed']:.3f} < tau {gates.tau:g}")
        if not r["gate_jaccard"]:
            why.append(f"Jaccard distance to seed {r['jaccard_to_seed']:.3f} < delta {gates.delta:g}")
        if not r["gate_safety"]:
            said = "safe" if r["safety_score"] < t else "unsafe"
            bound = f"< {t:g} - margin {m:g}" if said == "safe" else f">= {t:g} + margin {m:g}"
            other = "unsafe" if said == "safe" else "safe"
            against = (f"the cluster is labelled {other}" if labelled[i] else
                       f"seed reads {other} ({r['seed_safety_score']:.2f})")
            why.append(f"safety: ensemble reads {said} (P(unsafe) {r['safety_score']:.2f} {bound}), {against}")
        if duplicate[i]:
            why.append(duplicate[i])
        reasons.append("; ".join(why))
    out["gate_reason"] = reasons
    out["included"] = out["gate_reason"] == ""
    alive = out[out["included"]].groupby("cluster_id").size().reindex(out["cluster_id"].unique(), fill_value=0)
    for name in alive.index[alive.to_numpy() < 2]:
        rows_of = (out["cluster_id"] == name) & out["included"]
        out.loc[rows_of, "gate_reason"] = (f"cluster: {int(alive[name])} member left after the gates; a cluster "
                                           "needs two phrasings")
        out.loc[rows_of, "included"] = False
    return out
