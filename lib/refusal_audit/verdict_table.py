"""The run's verdict table: one row per verdict of every study, the first thing report.html shows and
``stats/verdicts.csv`` (so that a script reads what the report says).

A study contributes ``Study.verdict_rows(p, tables) -> list[verdict.Verdict]`` (``tables``: its ``stats/<study>/``
tables), one row per verdict with every text cell a non-empty string; a cell it cannot fill says why. This module
adds the row of a study whose statistics are missing or could not be read, saying which study and why, marks
every model organism TESTBED, and checks the rest.

``stats/verdicts.csv`` holds the text cells and, beside them, the numbers behind them as typed columns
(``NUMBERS``: empty where a row has no such number, ``empty_numbers`` saying why), so that ``pd.read_csv`` gives
floats; ``computed`` and ``commit`` say when and from which commit each study's rows were written. It is the run's
one table whatever ran last: writing some studies' rows (a study run alone) replaces only theirs, and a user's
system (a guard's verdict, a corpus: role ``verdict.USER``) adds or replaces its own row (``add``).
"""
from __future__ import annotations

import dataclasses
import html
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from . import store, studies
from .verdict import USER, Verdict, missing

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
NUMBERS = Verdict.NUMBERS
# the typed columns' meanings (the csv's legend); each number's text cell says why it is empty
NUMBER_COLUMNS = {
    "effect": ("the estimate (the study's scale, in the estimate cell)", "estimate"),
    "ci_low": ("its 95 % interval's lower end", "estimate"),
    "ci_high": ("its 95 % interval's upper end", "estimate"),
    "p": ("the corrected p-value", "estimate"),
    "fpr_rate": ("the simulated false-positive rate, a share", "fpr"),
    "power_rate": ("the power at the stated effect, a share (an answer that found its effect)", "power"),
    "mde": ("the smallest detectable effect (a null answer)", "power"),
    "n": ("the units the estimate rests on", "estimate"),
}
META = ("label", "headline", "testbed", "controls_summary", "empty_numbers", "computed", "commit")
CSV_COLUMNS = STUDY_KEYS + NUMBERS + META
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
    """Every row whose system is a model organism of the run (``models.<name>.testbed``) marked a testbed; a row
    its study marked one (a guard trained here) stays marked."""
    testbeds = {m for m, spec in p.models.items() if spec.testbed}
    return [dataclasses.replace(r, testbed=r.testbed or r.system in testbeds) for r in rows]


def rows(p, names: list[str], stats_dir: Path) -> list[Verdict]:
    """The verdicts of ``names`` (the run's studies, in run order), testbeds marked."""
    return mark_testbeds(p, [r for n in names for r in study_rows(p, n, stats_dir)])


def _empty_numbers(r: Verdict) -> str:
    """Why each empty number of a row is empty: the text cell that says it (a power for an answer that found
    its effect, an MDE for a null answer: only one of the two applies)."""
    cells, numbers = r.cells(), r.numbers()
    why = []
    for key in NUMBERS:
        if numbers[key] is not None:
            continue
        if key == "power_rate" and r.mde is not None:
            why.append("power_rate: a null answer (its mde is given)")
        elif key == "mde" and r.power_rate is not None:
            why.append("mde: the answer found its effect (its power_rate is given)")
        else:
            cell = NUMBER_COLUMNS[key][1]
            text = cells[cell]
            why.append(f"{key}: {text if text.startswith('not ') else f'no such number in this row (see {cell})'}")
    return "; ".join(why)


def frame(verdicts: list[Verdict], computed: str = "", commit: str = "") -> pd.DataFrame:
    """The verdicts as the table: the text columns (``STUDY_KEYS``), the typed numbers (``NUMBERS``, NaN where
    a row has none) and ``META`` (``computed``, ``commit``: when and from which commit the rows were written)."""
    records = [{**r.cells(), **r.numbers(), "label": r.label, "headline": r.headline,
                "testbed": r.testbed, "controls_summary": r.controls.summary(), "empty_numbers": _empty_numbers(r),
                "computed": computed, "commit": commit}
               for r in verdicts]
    return typed(pd.DataFrame(records, columns=list(CSV_COLUMNS)))


def typed(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its columns' types: the numbers floats (``n`` too, so that an empty one is NaN), the
    flags booleans, the rest text."""
    table = table.copy()
    for key in CSV_COLUMNS:
        if key not in table:
            table[key] = float("nan") if key in NUMBERS else False if key in ("headline", "testbed") else ""
    for key in NUMBERS:
        table[key] = pd.to_numeric(table[key], errors="coerce").astype(float)
    for key in ("headline", "testbed"):
        table[key] = table[key].map(lambda v: str(v) == "True" if not isinstance(v, bool) else v).astype(bool)
    for key in STUDY_KEYS + ("label", "controls_summary", "empty_numbers", "computed", "commit"):
        table[key] = table[key].fillna("").astype(str)
    return table[list(CSV_COLUMNS)]


def read(stats_dir: Path) -> pd.DataFrame:
    """``stats/verdicts.csv`` with its columns' types (an empty table when there is none)."""
    path = Path(stats_dir) / FILE
    if not path.is_file():
        return typed(pd.DataFrame(columns=list(CSV_COLUMNS)))
    return typed(pd.read_csv(path, dtype=str, keep_default_na=False))


def merge(old: pd.DataFrame, new: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """``old`` with ``new``'s studies' rows replaced by ``new``'s: a study's own rows replace all of its own, a
    user's system (role ``USER``) replaces only the same system's row; every other row is kept; studies in
    ``order`` (the params file's), any other after them."""
    user = new["role"] == USER
    own = set(new.loc[~user, "study"])
    users = set(zip(new.loc[user, "study"], new.loc[user, "system"]))
    keep = old[~((old["study"].isin(own) & (old["role"] != USER))
                 | pd.Series([(s, m) in users for s, m in zip(old["study"], old["system"])], index=old.index, dtype=bool))]
    table = pd.concat([keep, new], ignore_index=True) if len(keep) else new.reset_index(drop=True)
    rank = {name: i for i, name in enumerate(order)}
    key = table["study"].map(lambda s: rank.get(s, len(rank))) * 2 + (table["role"] == USER)
    return typed(table.iloc[key.argsort(kind="stable")].reset_index(drop=True))


def now() -> str:
    """The time a block of rows is written, UTC, to the second."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def build(p, names: list[str], stats_dir: Path) -> pd.DataFrame:
    """The verdict table of ``names`` (the run's studies, in run order), testbeds marked, stamped with the time
    and the commit."""
    return frame(rows(p, names, stats_dir), now(), store.git_commit() or "unknown")


def write(p, names: list[str], stats_dir: Path) -> pd.DataFrame:
    """``build`` the rows of ``names`` and write them into ``stats/verdicts.csv``, keeping every other study's
    rows (``merge``); returns the whole table."""
    return save(p, build(p, names, stats_dir), stats_dir)


def add(p, verdicts: list[Verdict], stats_dir: Path) -> pd.DataFrame:
    """A user's systems (``verdict.USER`` rows: a guard's verdict, a corpus) added to the run's table, each
    replacing its own earlier row; returns the whole table."""
    return save(p, frame(mark_testbeds(p, verdicts), now(), store.git_commit() or "unknown"), stats_dir)


def save(p, new: pd.DataFrame, stats_dir: Path) -> pd.DataFrame:
    table = merge(read(stats_dir), new, list(p.studies))
    stats_dir.mkdir(parents=True, exist_ok=True)
    table.to_csv(stats_dir / FILE, index=False)
    return table


def to_html(table: pd.DataFrame) -> str:
    """The detail table for report.html (its text columns): the columns' long names as headers (``title``),
    the keys as headers."""
    table = table[list(STUDY_KEYS)]
    head = "".join(f"<th title='{html.escape(COLUMNS[c])}'>{html.escape(c)}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in table.itertuples(index=False))
    return f"<table class='verdicts'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
