"""The run's verdict table: one row per verdict of every study, the first thing report.html shows and
``stats/verdicts.csv`` (so that a script reads what the report says).

A study contributes ``Study.verdict_rows(p, tables) -> list[verdict.Verdict]`` (``tables``: its ``stats/<study>/``
tables), one row per verdict with every text cell a non-empty string; a cell it cannot fill says why. This module
adds the row of a study whose statistics are missing or could not be read, saying which study and why, marks
every model organism TESTBED, and checks the rest.
"""
from __future__ import annotations

import dataclasses
import html
from pathlib import Path

import pandas as pd

from . import store, studies
from .verdict import Verdict, missing

# what each column holds (report.html's header); every text cell a study's row must fill
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
STUDY_KEYS = Verdict.TEXT
RELIABILITY = ("fpr", "power")  # the columns that say how far an answer can be trusted
FILE = "verdicts.csv"


class VerdictError(ValueError):
    """A study's verdict rows do not fill the table: the message names the study, the row and the key."""


def check_rows(study: str, rows: list[Verdict]) -> list[Verdict]:
    """``rows`` checked: each a ``Verdict`` of ``study`` whose every text cell is a non-empty string; else an
    error naming the study, the row's system and the key (a verdict without its reliability is not a verdict)."""
    if not rows:
        raise VerdictError(f"{study}: verdict_rows gave no row")
    for i, row in enumerate(rows):
        if not isinstance(row, Verdict):
            raise VerdictError(f"{study}: verdict row {i}: a {type(row).__name__}; expected a verdict.Verdict")
        for key, value in row.cells().items():
            if not isinstance(value, str) or not value.strip():
                raise VerdictError(f"{study}: verdict row {i} ({row.system or f'row {i}'}): {key!r} is empty; "
                                   f"expected a non-empty string ({COLUMNS[key]}, or why it cannot be given)")
        if row.study != study:
            raise VerdictError(f"{study}: verdict row {i}: 'study' is {row.study!r}, expected {study!r}")
    return rows


def study_rows(p, name: str, stats_dir: Path) -> list[Verdict]:
    """One study's checked rows, or its ``verdict.missing`` row saying why there are none."""
    folder = stats_dir / name
    tables = store.read_tables(folder)
    if not tables:
        return [missing(name, f"no statistics in {folder.name}/ (run notebook 05)")]
    try:
        rows = studies.get(name).verdict_rows(p, tables)
    except (KeyError, ValueError, IndexError) as err:  # a table of an older run, or one missing
        return [missing(name, f"its statistics could not be read ({type(err).__name__}: {err})")]
    return check_rows(name, rows)


def mark_testbeds(p, rows: list[Verdict]) -> list[Verdict]:
    """Every row whose system is a model organism of the run (``models.<name>.testbed``) marked a testbed."""
    testbeds = {m for m, spec in p.models.items() if spec.testbed}
    return [dataclasses.replace(r, testbed=r.system in testbeds) for r in rows]


def rows(p, names: list[str], stats_dir: Path) -> list[Verdict]:
    """The verdicts of ``names`` (the run's studies, in run order), testbeds marked."""
    return mark_testbeds(p, [r for n in names for r in study_rows(p, n, stats_dir)])


def frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """The verdicts as the table's text columns (``STUDY_KEYS``)."""
    return pd.DataFrame([r.cells() for r in verdicts], columns=list(STUDY_KEYS))


def build(p, names: list[str], stats_dir: Path) -> pd.DataFrame:
    """The verdict table of ``names`` (the run's studies, in run order), testbeds marked."""
    return frame(rows(p, names, stats_dir))


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
