"""Human labels back into the kv study: the filled blind sheets (``results/<run>/kv/annotation/``, written
by the judge stage) against every judge on the disagreement items, and between annotators
(``stats/kv/human_agreement.csv``; ``make kv-humans``)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from ... import report
from ...judges import human
from ...paths import run_dir, study_dir
from ...pipeline import Run
from . import analysis, verdicts

STUDY_FILES = {"sheet.csv", "key.csv", "counts.csv"}  # what the judge stage writes there; anything else is filled


def folder(p) -> Path:
    """The run's annotation folder (the blind sheet, its key, and the filled sheets saved beside them)."""
    return study_dir(p.run_name, "kv") / "annotation"


def filled_sheets(where: Path) -> list[Path]:
    """Every filled sheet in an annotation folder: each CSV there but the study's own three."""
    return sorted(f for f in where.glob("*.csv") if f.name not in STUDY_FILES) if where.is_dir() else []


def agreement(p, judgments: pd.DataFrame, generations: pd.DataFrame, sheets: list[Path]) -> pd.DataFrame:
    """``human.agreement_with_humans`` of the sheets (over all models and per model: ``rows`` "all"), and for
    each judge over the rows where it disagrees with the monitor (``rows`` "<judge> vs <monitor>
    disagreements", the paper's statistic: the humans against that judge and against the monitor there),
    with each rater's labelled and blank rows; a rater with no label at all keeps one row (n = 0) that
    carries its counts. An empty table when there is no sheet."""
    columns = [*human.AGREEMENT_COLUMNS, "rows", "rater_labelled", "rater_blank"]
    if not sheets:
        return pd.DataFrame(columns=columns)
    key_file = folder(p) / "key.csv"
    if not key_file.is_file():
        raise FileNotFoundError(f"{key_file}: not found; the sheets' key is written by the judge stage (notebook 04)")
    humans, counts = human.read_sheets(sheets, pd.read_csv(key_file, dtype=str), str(key_file))
    model = generations.drop_duplicates("generation_id").set_index("generation_id")["model"]
    parts = [human.agreement_with_humans(judgments, humans, analysis.REFUSING, model).assign(rows="all")]
    kv = getattr(p, "studies", {}).get("kv")
    monitor = kv.confirmatory.monitor if kv is not None else "keyword"
    wide = analysis.judges_refusal_table(judgments) if len(judgments) else pd.DataFrame()
    if monitor in wide:
        for other in [j for j in wide if j != monitor]:
            both = wide[[monitor, other]].dropna()
            ids = set(both.index[both[monitor] != both[other]])
            mine = humans[humans["generation_id"].isin(ids)]
            if len(mine):
                t = human.agreement_with_humans(judgments[judgments["generation_id"].isin(ids)], mine,
                                                analysis.REFUSING)
                parts.append(t[t["versus"].isin([other, monitor])].assign(rows=f"{other} vs {monitor} disagreements"))
    table = pd.concat(parts, ignore_index=True)
    counts = counts.assign(rater="human:" + counts["annotator"]).rename(
        columns={"labelled": "rater_labelled", "blank": "rater_blank"})
    silent = counts[~counts["rater"].isin(table["rater"])]
    table = pd.concat([table, pd.DataFrame({"model": "(all)", "rater": silent["rater"], "versus": "(no label)",
                                            "n": 0, "rows": "all"})], ignore_index=True)
    return table.merge(counts[["rater", "rater_labelled", "rater_blank"]], on="rater", how="left")[columns]


SHARE_COLUMNS = ["rater", "model", "family_member", "reason", "n", *(f"share_{k}" for k in human.HUMAN_LABELS)]


def label_shares(p, generations: pd.DataFrame, sheets: list[Path]) -> pd.DataFrame:
    """Per annotator, model, arm@filler and the reason a reply is on the sheet (the key's ``reason``: the monitor
    and the reference disagree, or one of the pair's blind spots): the labelled rows and the share of each of the
    four labels (refusal, soft refusal, compliance, degenerate / off-topic). An empty table without sheets."""
    if not sheets:
        return pd.DataFrame(columns=SHARE_COLUMNS)
    key_file = folder(p) / "key.csv"
    key = pd.read_csv(key_file, dtype=str)
    humans, _ = human.read_sheets(sheets, key, str(key_file))
    reason = key.drop_duplicates("generation_id").set_index("generation_id").get("reason")
    sink = p.studies["kv"].sink if "kv" in getattr(p, "studies", {}) else 4
    g = generations.drop_duplicates("generation_id").set_index("generation_id")
    h = humans.assign(model=humans["generation_id"].map(g["model"]),
                      family_member=[f"{analysis.arm(g.at[i, 'policy'], g.at[i, 'sink'], sink)}@{int(g.at[i, 'filler_tokens'])}"
                                     if i in g.index else "" for i in humans["generation_id"]],
                      reason=humans["generation_id"].map(reason) if reason is not None else "")
    rows = []
    for (rater, model, member, why), t in h.groupby(["judge", "model", "family_member", "reason"], sort=True):
        rows.append({"rater": rater, "model": model, "family_member": member, "reason": why, "n": len(t),
                     **{f"share_{k}": float((t["human_label"] == k).mean()) for k in human.HUMAN_LABELS}})
    return pd.DataFrame(rows, columns=SHARE_COLUMNS)


def collect(p, sheets: list[str]) -> list[Path]:
    """``make kv-humans``: the named sheets copied into the run's annotation folder (so that notebook 05
    reads them on every later run), or, with none named, the sheets already there. A name that would
    replace a different file there, or no sheet at all, is an error."""
    where = folder(p)
    if not sheets:
        found = filled_sheets(where)
        if not found:
            raise FileNotFoundError(f"{where}: no filled sheet; save filled copies of sheet.csv there (the annotator "
                                    "is the file's name) or name them: make kv-humans SHEETS=a.csv,b.csv RUN=...")
        return found
    key_file = where / "key.csv"
    if not key_file.is_file():
        raise FileNotFoundError(f"{key_file}: not found; the sheets' key is written by the judge stage "
                                f"(run {p.run_name!r} first)")
    srcs = [Path(name) for name in sheets]
    for src in srcs:
        if src.name in STUDY_FILES:
            raise ValueError(f"{src}: a filled sheet may not be named {src.name} (the study's own file)")
        dest = where / src.name
        if (src.is_file() and dest.is_file() and dest.resolve() != src.resolve()
                and dest.read_bytes() != src.read_bytes()):
            raise ValueError(f"{src}: {dest} already holds a different sheet of that name; rename one")
    human.read_sheets(srcs, pd.read_csv(key_file, dtype=str), str(key_file))  # every error before any copy
    out = []
    for src in srcs:
        dest = where / src.name
        if dest.resolve() != src.resolve():
            shutil.copyfile(src, dest)
        out.append(dest)
    return out


def summary(table: pd.DataFrame | None) -> list:
    """What notebook 05 shows: the table, or a plain statement that no sheet has come back."""
    if table is None or table.empty:
        return ["**Human labels**: none yet. No filled annotation sheet is in this run's annotation folder, so no "
                "human-vs-judge agreement is reported (fill `annotation/sheet.csv`, then `make kv-humans SHEETS=... "
                "RUN=...`)."]
    return ["**Human labels** on the disagreement items: each annotator against every judge and the other "
            "annotators (agreement, Cohen's kappa; `missed_refusals`: the annotator says refusal, the other does "
            "not):", table.round(3)]


def run(sheets: str, run_name: str, params_file: str) -> list[str]:
    """``make kv-humans SHEETS=a.csv,b.csv RUN=name``: the sheets into the run's annotation folder
    (``collect``), the kv statistics recomputed (``stats/kv/``, ``human_agreement.csv`` among them) and,
    for a finished run, report.html rewritten. Returns the lines to print."""
    r = Run(params_file, "kv")
    if run_name:
        r.p.run_name, r.dir = run_name, run_dir(run_name)
    sheets = collect(r.p, [s.strip() for s in sheets.split(",") if s.strip()])
    tables = r.analyse()["kv"]
    table = tables["human_agreement"]
    lines = [f"read {', '.join(str(s) for s in sheets)}", *verdicts.human(table, tables.get("human_labels"), r.p),
             f"wrote {r.dir / 'stats' / 'kv' / 'human_agreement.csv'}"]
    if (r.dir / "report.html").is_file():
        lines.append(f"wrote {report.write(r)}")
    return lines
