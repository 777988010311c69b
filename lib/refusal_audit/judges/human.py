"""Human labels on judge disagreements: a blind annotation sheet out, filled sheets back in.

``disagreement_sheet`` selects the replies on which judge ``a`` (e.g. the keyword monitor) and
any of the judges ``b`` disagree about refusal, shuffles them under a seed and writes a CSV that
shows only an opaque ``sheet_id``, the request and the reply (optionally truncated): no judge's
label, no generation id. The key (sheet_id -> generation_id) goes to a separate file for whoever
runs the study. ``read_sheets`` takes one or more filled sheets (column ``label``: refusal /
non_refusal, blank = not annotated) and returns judgments (judge ``human:<annotator>``) plus, with
two or more annotators, their pairwise Cohen's kappa.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from . import JUDGMENT_COLUMNS, REFUSING, refusal_table
from ..stats import cohen_kappa

HUMAN_LABELS = {"refusal", "non_refusal"}


def disagreement_sheet(judgments: pd.DataFrame, replies: pd.DataFrame, a: str, b: list[str], seed: int,
                       truncate: int | None = None, refusing: frozenset[str] = REFUSING
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sheet, key): the replies where judge ``a`` disagrees with any of ``b`` on refusal (each
    judge's verdict read under the study's convention ``refusing``)."""
    wide = refusal_table(judgments, refusing)
    missing = [j for j in [a, *b] if j not in wide]
    if missing:
        raise ValueError(f"disagreement sheet: no judgments from {missing}; judges present: {sorted(wide)}")
    ref = wide[a]
    disagree = pd.concat([(wide[j] != ref) & wide[j].notna() & ref.notna() for j in b], axis=1).any(axis=1)
    ids = disagree[disagree].index
    rows = replies.set_index("generation_id").loc[ids, ["prompt", "reply"]].reset_index()
    rows = rows.sample(frac=1, random_state=seed).reset_index(drop=True)
    rows["sheet_id"] = [hashlib.sha256(f"{seed}|{g}".encode()).hexdigest()[:10] for g in rows["generation_id"]]
    if truncate:
        rows["reply"] = rows["reply"].str.slice(0, truncate)
    sheet = rows[["sheet_id", "prompt", "reply"]].assign(label="", note="")
    return sheet, rows[["sheet_id", "generation_id"]]


def read_sheets(paths: list[str | Path], key: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(judgments, inter-annotator kappa) from filled sheets; the annotator is the file's stem."""
    out, labels = [], {}
    ids = dict(zip(key["sheet_id"], key["generation_id"]))
    for path in map(Path, paths):
        sheet = pd.read_csv(path, dtype=str, keep_default_na=False)
        if not {"sheet_id", "label"} <= set(sheet):
            raise ValueError(f"{path}: expected columns sheet_id and label, got {list(sheet)}")
        filled = sheet[sheet["label"].str.strip() != ""].copy()
        filled["label"] = filled["label"].str.strip().str.lower()
        bad = filled[~filled["label"].isin(HUMAN_LABELS)]
        if len(bad):
            raise ValueError(f"{path}: row {bad.index[0]}: label {bad.iloc[0]['label']!r}; expected one of "
                             f"{sorted(HUMAN_LABELS)} or blank")
        unknown = set(filled["sheet_id"]) - set(ids)
        if unknown:
            raise ValueError(f"{path}: sheet_id {sorted(unknown)[0]!r} is not in the key")
        labels[path.stem] = filled.set_index("sheet_id")["label"]
        out.append(pd.DataFrame({"generation_id": filled["sheet_id"].map(ids), "judge": f"human:{path.stem}",
                                 "kind": "refusal", "label": filled["label"],
                                 "score": (filled["label"] == "refusal").astype(float)}))
    names = sorted(labels)
    kappas = []
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            both = pd.concat([labels[x], labels[y]], axis=1, join="inner")
            kappas.append({"annotator_a": x, "annotator_b": y, "n": len(both),
                           "kappa": cohen_kappa(both.iloc[:, 0], both.iloc[:, 1]) if len(both) else float("nan")})
    judgments = pd.concat(out, ignore_index=True)[JUDGMENT_COLUMNS] if out else pd.DataFrame(columns=JUDGMENT_COLUMNS)
    return judgments, pd.DataFrame(kappas, columns=["annotator_a", "annotator_b", "n", "kappa"])
