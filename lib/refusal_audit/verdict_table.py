"""The run's verdict table: one row per verdict of every study, the first thing report.html shows and
``stats/verdicts.csv`` (so that a script reads what the report says).

A study contributes ``verdict_rows(p, tables) -> list[dict]`` (``tables``: its ``stats/<study>/`` tables),
one dict per verdict with every key of ``STUDY_KEYS`` a non-empty string; a cell it cannot fill says why.
This module adds the rows a study could not give (its statistics are missing, it states no table, its
function failed), each saying which study and why, marks every model organism TESTBED, and checks the rest.
"""
from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from . import store, studies

# what each column holds (report.html's header); every key a study's row must fill
COLUMNS = {
    "study": "study",
    "system": "system (model or guard)",
    "role": "what the row is (primary, positive control, null control)",
    "question": "question",
    "answer": "answer",
    "estimate": "estimate [95 % interval]",
    "fpr": "false-positive rate (simulated)",
    "power": "power at a stated effect, or for a null answer the smallest effect the run could have detected",
    "controls": "controls",
}
STUDY_KEYS = tuple(COLUMNS)
RELIABILITY = ("fpr", "power")  # the columns that say how far an answer can be trusted
FILE = "verdicts.csv"


class VerdictError(ValueError):
    """A study's verdict rows do not fill the table: the message names the study, the row and the key."""


def check_rows(study: str, rows: list[dict]) -> pd.DataFrame:
    """``rows`` as a table in ``STUDY_KEYS`` order; a row without a key, or with an empty cell, is an error
    naming the study, the row's system and the key (a verdict without its reliability is not a verdict)."""
    if not rows:
        raise VerdictError(f"{study}: verdict_rows gave no row")
    for i, row in enumerate(rows):
        for key in STUDY_KEYS:
            value = row.get(key)
            if not isinstance(value, str) or not value.strip():
                who = row.get("system") or f"row {i}"
                raise VerdictError(f"{study}: verdict row {i} ({who}): {key!r} is "
                                   f"{'missing' if key not in row else 'empty'}; expected a non-empty string "
                                   f"({COLUMNS[key]}, or why it cannot be given)")
        if row["study"] != study:
            raise VerdictError(f"{study}: verdict row {i}: 'study' is {row['study']!r}, expected {study!r}")
    return pd.DataFrame([{k: row[k] for k in STUDY_KEYS} for row in rows])


def missing_row(study: str, why: str) -> dict:
    """The row of a study whose verdicts cannot be read: every cell says so."""
    return {"study": study, "system": "(none)", "role": "primary", "question": "(not available)",
            "answer": "not computed", **{k: f"not computed: {why}" for k in ("estimate", "fpr", "power", "controls")}}


def study_rows(p, name: str, stats_dir: Path) -> pd.DataFrame:
    """One study's checked rows, or its ``missing_row`` saying why there are none."""
    module = studies.module(name)
    folder = stats_dir / name
    if not hasattr(module, "verdict_rows"):
        return check_rows(name, [missing_row(name, "the study states no verdict table (no verdict_rows)")])
    tables = store.read_tables(folder)
    if not tables:
        return check_rows(name, [missing_row(name, f"no statistics in {folder.name}/ (run notebook 05)")])
    try:
        rows = module.verdict_rows(p, tables)
    except (KeyError, ValueError, IndexError) as err:  # a table of an older run, or one missing
        return check_rows(name, [missing_row(name, f"its statistics could not be read ({type(err).__name__}: {err})")])
    return check_rows(name, rows)


def mark_testbeds(p, table: pd.DataFrame) -> pd.DataFrame:
    """Every system that is a model organism of the run (``models.<name>.testbed``) reads 'name (TESTBED)'."""
    testbeds = {m for m, spec in p.models.items() if spec.testbed}
    out = table.copy()
    out["system"] = [f"{s} (TESTBED)" if s in testbeds else s for s in out["system"]]
    return out


def build(p, names: list[str], stats_dir: Path) -> pd.DataFrame:
    """The verdict table of ``names`` (the run's studies, in run order), testbeds marked."""
    return mark_testbeds(p, pd.concat([study_rows(p, n, stats_dir) for n in names], ignore_index=True))


def write(p, names: list[str], stats_dir: Path) -> pd.DataFrame:
    """``build`` the table and write it as ``stats/verdicts.csv``."""
    table = build(p, names, stats_dir)
    stats_dir.mkdir(parents=True, exist_ok=True)
    table.to_csv(stats_dir / FILE, index=False)
    return table


def to_html(table: pd.DataFrame) -> str:
    """The table for report.html: the columns' long names as headers (``title``), the keys as headers."""
    head = "".join(f"<th title='{html.escape(COLUMNS[c])}'>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in table.itertuples(index=False))
    return f"<table class='verdicts'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
