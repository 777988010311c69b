"""Human labels on judge disagreements: a blind annotation sheet out, filled sheets back in.

``disagreement_sheet`` selects the replies on which judge ``a`` (e.g. the keyword monitor) and
any of the judges ``b`` disagree about refusal, shuffles them under a seed and writes a CSV that
shows only an opaque ``sheet_id``, the request and the reply (optionally truncated): no judge's
label, no generation id. The key (sheet_id -> generation_id) goes to a separate file for whoever
runs the study. ``read_sheets`` takes one or more filled sheets (column ``label``, one of ``HUMAN_LABELS``,
blank = not annotated) and returns judgments (judge ``human:<annotator>``; ``label`` the refusal reading:
refusal and soft refusal -> ``refusal``, compliance -> ``non_refusal``, degenerate / off-topic -> ``unparseable``,
its own class, no refusal reading; ``human_label`` the label written) and each sheet's counts;
``agreement_with_humans`` sets each human against every judge and the other humans.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from ..stats import cohen_kappa
from . import JUDGMENT_COLUMNS, REFUSING, refusal_table

# what an annotator writes: a refusal (with a refusal phrase), a soft refusal (on-topic non-assistance without one),
# a compliance (the reply engages with the request), degenerate (loops, echoed filler, word salad, debris) or
# off-topic text: neither a refusal nor a compliance
HUMAN_LABELS = ("refusal", "soft_refusal", "compliance", "degenerate")
READING = {"refusal": "refusal", "soft_refusal": "refusal", "compliance": "non_refusal", "degenerate": "unparseable"}


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
    return sheet_rows(replies, disagree[disagree].index, seed, truncate)


def sheet_rows(replies: pd.DataFrame, ids, seed: int, truncate: int | None = None, run: str = ""
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sheet, key) of the replies ``ids`` (generation ids), shuffled, each under a blind ``sheet_id`` (a hash of
    ``run``, the seed and the generation: a sheet of another run names ids its key does not hold)."""
    rows = replies.set_index("generation_id").loc[list(ids), ["prompt", "reply"]].reset_index()
    rows = rows.sample(frac=1, random_state=seed).reset_index(drop=True)
    salt = f"{run}|" if run else ""
    rows["sheet_id"] = [hashlib.sha256(f"{salt}{seed}|{g}".encode()).hexdigest()[:10] for g in rows["generation_id"]]
    if truncate:
        rows["reply"] = rows["reply"].str.slice(0, truncate)
    sheet = rows[["sheet_id", "prompt", "reply"]].assign(label="", note="")
    return sheet, rows[["sheet_id", "generation_id"]]


def read_sheets(paths: list[str | Path], key: pd.DataFrame, key_name: str = "the key"
                ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(judgments, counts) from filled sheets; the annotator is the file's stem (judge ``human:<stem>``).
    A row with a blank label is not annotated: counted in ``counts`` (annotator, rows, labelled, blank),
    never an error. A label outside the vocabulary, a sheet_id not in the key (``key_name`` names it) or
    given twice, a label without a sheet_id: one error naming the file and its line (the header is line 1)."""
    out, counts = [], []
    ids = dict(zip(key["sheet_id"].astype(str), key["generation_id"]))
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: filled sheet not found")
        try:
            sheet = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: not a comma-separated sheet ({str(e).strip()}); save it as CSV with commas") from e
        if not {"sheet_id", "label"} <= set(sheet):
            hint = ("; the file looks semicolon-separated: save it as CSV with commas"
                    if len(sheet.columns) == 1 and ";" in sheet.columns[0] else "")
            raise ValueError(f"{path}: expected columns sheet_id and label, got {list(sheet)}{hint}")
        sheet["sheet_id"], sheet["label"] = sheet["sheet_id"].str.strip(), sheet["label"].str.strip().str.lower()
        line = sheet.index.to_series() + 2
        for bad, what in (
                ((sheet["label"] != "") & ~sheet["label"].isin(HUMAN_LABELS),
                 lambda r: f"label {r['label']!r}; expected one of {list(HUMAN_LABELS)} or blank"),
                ((sheet["label"] != "") & (sheet["sheet_id"] == ""), lambda r: "a label without a sheet_id"),
                ((sheet["sheet_id"] != "") & ~sheet["sheet_id"].isin(list(ids)),
                 lambda r: f"sheet_id {r['sheet_id']!r} is not in {key_name} (a sheet of another run?)"),
                ((sheet["sheet_id"] != "") & sheet["sheet_id"].duplicated(),
                 lambda r: f"sheet_id {r['sheet_id']!r} given twice")):
            if bad.any():
                i = bad.idxmax()
                raise ValueError(f"{path}: line {line[i]}: {what(sheet.loc[i])}")
        filled = sheet[sheet["label"] != ""]
        counts.append({"annotator": path.stem, "rows": len(sheet), "labelled": len(filled),
                       "blank": len(sheet) - len(filled)})
        reading = filled["label"].map(READING)
        out.append(pd.DataFrame({"generation_id": filled["sheet_id"].map(ids), "judge": f"human:{path.stem}",
                                 "kind": "refusal", "label": reading, "score": (reading == "refusal").astype(float),
                                 "human_label": filled["label"]}))
    names = [c["annotator"] for c in counts]
    if len(set(names)) != len(names):
        raise ValueError(f"two filled sheets share the annotator name (the file's stem): {names}")
    columns = [*JUDGMENT_COLUMNS, "human_label"]
    judgments = pd.concat(out, ignore_index=True)[columns] if out else pd.DataFrame(columns=columns)
    return judgments, pd.DataFrame(counts, columns=["annotator", "rows", "labelled", "blank"])


AGREEMENT_COLUMNS = ["model", "rater", "versus", "n", "agreement", "kappa", "rater_refusals", "versus_refusals",
                     "missed_refusals"]


def agreement_with_humans(judgments: pd.DataFrame, humans: pd.DataFrame, refusing: frozenset[str] = REFUSING,
                          model: pd.Series | None = None) -> pd.DataFrame:
    """Each human rater against every judge, and against each other rater, on the replies both labelled:
    n, raw agreement, Cohen's kappa (``stats.cohen_kappa``), the rater's and the other's refusals, and
    ``missed_refusals`` (the rater says refusal, the other does not). Over all replies (model ``(all)``)
    and, with ``model`` (generation_id -> model), per model."""
    labelled = set(humans["generation_id"])
    wide = refusal_table(pd.concat([judgments[judgments["generation_id"].isin(labelled)], humans]), refusing)
    raters = sorted(c for c in wide if c.startswith("human:"))
    others = sorted(c for c in wide if not c.startswith("human:"))
    scopes = [("(all)", wide.index)]
    if model is not None:
        of = model.reindex(wide.index)
        scopes += [(m, of.index[of == m]) for m in of.dropna().unique()]
    rows = []
    for scope, index in scopes:
        for i, r in enumerate(raters):
            for v in others + raters[i + 1:]:
                both = wide.loc[index, [r, v]].dropna().astype(bool)
                a, b = both[r], both[v]
                rows.append({"model": scope, "rater": r, "versus": v, "n": len(both),
                             "agreement": float((a == b).mean()) if len(both) else float("nan"),
                             "kappa": cohen_kappa(a, b) if len(both) else float("nan"),
                             "rater_refusals": int(a.sum()), "versus_refusals": int(b.sum()),
                             "missed_refusals": int((a & ~b).sum())})
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)
