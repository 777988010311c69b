"""Reading report.html as a reader's browser shows it, with the standard library: the first screen's tables (one
per study, ``table.first-screen``) and the checks every report must pass (``check_first_screen``,
``check_numbers``), shared by the unit tests and the ci run's."""
from __future__ import annotations

import math
import re
from html.parser import HTMLParser

import pandas as pd

from refusal_audit import first_screen, verdict_table

CELL_LIMIT = first_screen.MAX_CELL  # "about 60 characters"


class FirstScreen(HTMLParser):
    """Every ``<table class='first-screen' data-study=...>``: its header and rows (cells' text), by study."""

    def __init__(self):
        super().__init__()
        self.tables, self.study, self.rows, self.cell = {}, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "first-screen" in (a.get("class") or ""):
            self.study, self.rows = a["data-study"], []
        elif self.study is None:
            return
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if self.study is None:
            return
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(re.sub(r"\s+", " ", self.cell).strip())
            self.cell = None
        elif tag == "table":
            header, *rows = self.rows
            self.tables[self.study] = pd.DataFrame(rows, columns=header)
            self.study = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def first_screen_tables(page: str) -> dict[str, pd.DataFrame]:
    parser = FirstScreen()
    parser.feed(page)
    return parser.tables


def check_first_screen(page: str, studies: list[str], missing: tuple = ()) -> dict[str, pd.DataFrame]:
    """The first screen comes before the detail table and holds a block per study, in order: for each of
    ``studies`` a table, one row per system (and part) for the primary question, every cell at most
    ``CELL_LIMIT`` characters, the answer, the estimate, p, the false-positive rate and the power or MDE in every
    row; for each of ``missing`` (a study without rows) a block saying why. Returns the tables."""
    tables = first_screen_tables(page)
    blocks = re.findall(r"<div class='block' data-study='([^']+)'>", page)
    for study in list(studies) + list(missing):
        assert study in blocks, f"{study}: no block on the first screen ({blocks})"
    assert list(tables) == list(studies), (list(tables), studies)
    for study in missing:
        block = page[page.index(f"data-study='{study}'>"):]
        assert "not computed" in block[:block.index("</div>")], study
    assert page.index("class='screen'") < page.index("class='verdicts'")
    for study, t in tables.items():
        assert len(t), f"{study}: no row on the first screen"
        assert {"system", "answer", "estimate", "p", "fpr", "power", "n"} <= set(t.columns), (study, list(t.columns))
        names = t["system"].str.replace(r" (TESTBED|positive control|null control|user's system)\b", "", regex=True)
        key = t.assign(system=names)[["system", "part"] if "part" in t else ["system"]]
        assert not key.duplicated().any(), f"{study}: a system twice on the first screen:\n{key}"
        long = [(c, v) for c in t.columns for v in t[c] if len(v) > CELL_LIMIT]
        assert not long, f"{study}: cells over {CELL_LIMIT} characters: {long}"
        assert t[["answer", "estimate"]].ne("").all().all(), study
    return tables


def _close(number: float, text: str) -> bool:
    """Whether ``number`` is written in ``text`` at the precision the text uses (2 or 3 decimals, 3 significant
    digits, a percentage), sign or not."""
    if math.isnan(number):
        return True
    written = {f"{number:.2f}", f"{number:.3f}", f"{number:.3g}", f"{100 * number:.1f}%", f"{100 * number:.1f} %",
               f"{abs(number):.2f}", f"{abs(number):.3f}"}
    return any(w in text for w in written)


def check_numbers(csv_path) -> pd.DataFrame:
    """``stats/verdicts.csv`` read by pandas gives floats in the typed columns, and each number agrees with the
    text cell that states it (the estimate's interval and p, the false-positive rate); returns the table."""
    table = pd.read_csv(csv_path)
    for key in verdict_table.NUMBERS:
        assert table[key].dtype.kind == "f", (key, table[key].dtype)
    for _, r in table.iterrows():
        where = f"{r['study']} / {r['system']}"
        if not math.isnan(r["ci_low"]) and r["role"] != "calibration":
            assert _close(r["ci_low"], r["estimate"]) and _close(r["ci_high"], r["estimate"]), (where, r["estimate"])
        if not math.isnan(r["p"]):
            assert _close(r["p"], r["estimate"]) or r["p"] < 1e-3, (where, r["p"], r["estimate"])
        if not math.isnan(r["fpr_rate"]):
            assert _close(r["fpr_rate"], r["fpr"]), (where, r["fpr_rate"], r["fpr"])
        empty = [k for k in verdict_table.NUMBERS if math.isnan(r[k])]
        assert all(f"{k}:" in str(r["empty_numbers"]) for k in empty), (where, empty, r["empty_numbers"])
    return table
