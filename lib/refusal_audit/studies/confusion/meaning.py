"""The same-meaning rule measured: its precision and recall on hand-labelled cross-cluster pairs.

Across clusters the study calls two prompts of the same label the same meaning when their MiniLM cosine
exceeds theta (DEFINITIONS.md). ``data/confusion/same_meaning_pairs.csv`` labels pairs of prompts of the same
intended label from different clusters or seeds, at and near theta, ``same`` or ``different`` intent (the
labelling rule is in ``data/confusion/SOURCE.md``). ``benchmarks/confusion_same_meaning.py`` embeds them once
and commits their cosines (``assets/same_meaning_pairs_scored.csv``, ids, labels and cosines only); the run
reads that table (``rule_at``), so the verdict states the rule's error without loading the encoder.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd

from ... import stats

PAIRS = Path(__file__).resolve().parents[4] / "data" / "confusion" / "same_meaning_pairs.csv"
KNOWN = PAIRS.with_name("known_pairs.csv")  # designed pairs of the corpus (twins, look-alikes): rule only, not measured
CORPUS = PAIRS.with_name("clusters.csv")  # the cluster file whose ids both pair files use
SCORED = Path(__file__).resolve().parents[2] / "assets" / "same_meaning_pairs_scored.csv"
LABELS = ("same", "different")
COLUMNS = ["source", "id_a", "id_b", "label"]


def read_pairs(path: str | Path, texts: dict[str, dict[str, str]], only: str | None = None,
               source: str | None = None) -> pd.DataFrame:
    """The labelled pair file, checked row by row before any work: ``texts`` maps each source to its prompts
    (id -> text). Unknown source or id, a label outside {same, different}, or a pair whose two prompts are the
    same prompt (one id, or equal texts) stops with one line naming the file and the row (file lines, the
    header is line 1). ``only``: keep the rows of that source (the others are not checked); ``source``: a
    file without the ``source`` column (a user's: ``id_a, id_b, label``, then any columns for its reader, as on the
    blind sheet ``make confusion`` writes), every row of that source."""
    path = Path(path)
    columns = COLUMNS if source is None else COLUMNS[1:]
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        # a user's file may carry more columns after the three (the blind sheet's seeds and prompts, for its reader)
        head = reader.fieldnames if source is None else (reader.fieldnames or [])[:len(columns)]
        if head != columns:
            raise ValueError(f"{path}: line 1: columns {reader.fieldnames}; expected {columns}"
                             + ("" if source is None else " first (more columns after them are kept for the reader)"))
        rows = []
        for line, row in enumerate(reader, start=2):
            if any(row.get(c) is None for c in columns):
                raise ValueError(f"{path}: line {line}: {len([v for v in row.values() if v is not None])} fields; "
                                 f"expected {len(columns)} ({', '.join(columns)})")
            src = row["source"].strip() if source is None else source
            a, b, label = (row[c].strip() for c in COLUMNS[1:])
            if only is not None and src != only:
                continue
            if src not in texts:
                raise ValueError(f"{path}: line {line}: source {src!r}; expected one of {sorted(texts)}")
            for x in (a, b):
                if x not in texts[src]:
                    raise ValueError(f"{path}: line {line}: unknown id {x!r} in source {src!r}")
            if label not in LABELS:
                raise ValueError(f"{path}: line {line}: label {label!r}; expected one of {LABELS}"
                                 + (" (an unfilled row of the blind sheet: label it or delete it)" if not label else ""))
            if a == b or texts[src][a].strip().lower() == texts[src][b].strip().lower():
                raise ValueError(f"{path}: line {line}: {a!r} and {b!r} are the same prompt; a labelled pair "
                                 "needs two different prompts")
            rows.append({"line": line, "source": src, "id_a": a, "id_b": b, "label": label})
    return pd.DataFrame(rows, columns=["line", "source", "id_a", "id_b", "label"])


def called_precision_recall(same: np.ndarray, called: np.ndarray, alpha: float = 0.05) -> dict[str, float]:
    """Any rule's calls against the labels: precision (labelled same among the pairs it calls same) and recall (called
    same among the pairs labelled same), each with its Wilson interval."""
    same, called = np.asarray(same, dtype=bool), np.asarray(called, dtype=bool)
    tp, n_called, n_same = int((same & called).sum()), int(called.sum()), int(same.sum())
    out = {"n_pairs": len(same), "n_same": n_same, "n_called": n_called, "true_positive": tp}
    for name, k, n in (("precision", tp, n_called), ("recall", tp, n_same)):
        r = stats.wilson(k, n, alpha) if n else None
        out.update({name: r.rate if r else np.nan, f"{name}_lo": r.lo if r else np.nan,
                    f"{name}_hi": r.hi if r else np.nan})
    return out


def precision_recall(same: np.ndarray, cosine: np.ndarray, theta: float, alpha: float = 0.05) -> dict[str, float]:
    """The rule "cosine > theta" against the labels (``called_precision_recall``)."""
    if not 0 < theta < 1:
        raise ValueError(f"theta must be in (0, 1) (a cosine threshold), got {theta}")
    return {"theta": theta, **called_precision_recall(same, np.asarray(cosine) > theta, alpha)}


#: The theta grid of the rule table: 0.600 to 0.950 in steps of 0.025.
THETAS = tuple(np.round(np.arange(0.60, 0.96, 0.025), 3))


def rule_table(scored: pd.DataFrame, thetas=THETAS) -> pd.DataFrame:
    """Precision, recall and F1 of "cosine > theta" at each theta of a grid, over all pairs and per label."""
    rows = []
    for group, g in [("all", scored)] + list(scored.groupby("prompt_label", sort=True)):
        for t in thetas:
            r = precision_recall(g["label"].eq("same").to_numpy(), g["cosine"].to_numpy(), float(t))
            p, q = r["precision"], r["recall"]
            rows.append({"group": group, **r, "f1": 2 * p * q / (p + q) if p + q > 0 else np.nan})
    return pd.DataFrame(rows)


def rule_at(theta: float, scored: pd.DataFrame | None = None) -> dict[str, float] | None:
    """Precision and recall of the run's theta on the committed scored pairs (None when the table is absent)."""
    if scored is None:
        if not SCORED.is_file():
            return None
        scored = pd.read_csv(SCORED)
    return precision_recall(scored["label"].eq("same").to_numpy(), scored["cosine"].to_numpy(), theta)


# --- known labels: where they exist they decide same meaning (DEFINITIONS.md, "Known labels") --------------------
def known_from_rows(rows: pd.DataFrame, cluster_of: dict[str, str], label_of: dict[str, str], path) -> tuple:
    """Cluster-level known labels ((cluster a, cluster b, same), sorted) from labelled prompt pairs (``rows``:
    line, id_a, id_b, label): a pair labelled ``same`` or ``different`` intent labels the intents of its two
    clusters (each member of a cluster is a paraphrase of its seed). Pairs with a prompt outside ``cluster_of``
    (a cluster the run did not draw) are skipped. Stops with one line naming ``path`` and the line: two prompts
    of one cluster, prompts without the same intended label (safe | unsafe), or one pair of clusters labelled
    both same and different."""
    seen: dict[tuple[str, str], tuple[bool, int]] = {}
    for r in rows.itertuples():
        if r.id_a not in cluster_of or r.id_b not in cluster_of:
            continue
        a, b = cluster_of[r.id_a], cluster_of[r.id_b]
        if a == b:
            raise ValueError(f"{path}: line {r.line}: {r.id_a!r} and {r.id_b!r} are of one cluster ({a!r}); a "
                             "labelled pair joins two clusters (a cluster is one intent)")
        la, lb = label_of.get(r.id_a, ""), label_of.get(r.id_b, "")
        if la != lb or la not in ("safe", "unsafe"):
            raise ValueError(f"{path}: line {r.line}: {r.id_a!r} ({la or 'no label'}) and {r.id_b!r} "
                             f"({lb or 'no label'}); a labelled pair joins two prompts of the same intended label "
                             "(safe or unsafe): opposite labels never share a meaning")
        key, same = tuple(sorted((a, b))), r.label == "same"
        if key in seen and seen[key][0] != same:
            raise ValueError(f"{path}: line {r.line}: clusters {key[0]!r} and {key[1]!r} labelled {r.label!r} here "
                             f"and {'same' if seen[key][0] else 'different'!r} on line {seen[key][1]}; one label per "
                             "pair of clusters")
        seen.setdefault(key, (same, r.line))
    return tuple((a, b, s) for (a, b), (s, _) in sorted(seen.items()))


def corpus_known(file_rows: pd.DataFrame, drawn) -> tuple:
    """The known labels of a run on the repository's cluster file (``file_rows``: its rows, ids
    ``<cluster_id>-<member>``): the ``clusters`` rows of the measured pair file (``PAIRS``) and every row of the
    designed pair file (``KNOWN``), restricted to the clusters ``drawn`` by the run."""
    ids = file_rows["cluster_id"] + "-" + file_rows["member"].astype(str)
    texts = {"clusters": dict(zip(ids, file_rows["prompt"]))}
    label_of = dict(zip(ids, file_rows["label"]))
    drawn = set(drawn)
    cluster_of = {i: c for i, c in zip(ids, file_rows["cluster_id"]) if c in drawn}
    known = []
    for path, only in ((PAIRS, "clusters"), (KNOWN, None)):
        if path.is_file():
            known += known_from_rows(read_pairs(path, texts, only=only), cluster_of, label_of, path)
    return _merge(known)


def user_known(path: str | Path, rows: pd.DataFrame) -> tuple:
    """A user's known labels (``make confusion ... PAIRS=file.csv``: ``id_a, id_b, label`` same | different, ids
    of the clusters file ``rows``), checked before any work; cluster-level, as ``known_from_rows``."""
    ids = rows["id"].astype(str)
    texts = {"user": dict(zip(ids, rows["prompt"]))}
    pairs = read_pairs(path, texts, source="user")
    return known_from_rows(pairs, dict(zip(ids, rows["cluster_id"])), dict(zip(ids, rows["label"])), path)


def _merge(known: list) -> tuple:
    """One label per pair of clusters across files (a conflict between files stops the run)."""
    out: dict[tuple[str, str], bool] = {}
    for a, b, s in known:
        if out.setdefault((a, b), s) != s:
            raise ValueError(f"{PAIRS} and {KNOWN}: clusters {a!r} and {b!r} labelled both same and different; one "
                             "label per pair of clusters")
    return tuple((a, b, s) for (a, b), s in sorted(out.items()))
