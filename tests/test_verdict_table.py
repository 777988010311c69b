"""The verdict table (``verdict_table``): report.html opens with it and ``stats/verdicts.csv`` holds the same
rows; every study of the ci run fills every column; a verdict without its reliability, or a study without
its statistics, is named."""
from html.parser import HTMLParser
from types import SimpleNamespace

import pandas as pd
import pytest
import report_page

from refusal_audit import report, studies, verdict_table
from refusal_audit.verdict import Controls, ControlState, Verdict
from refusal_audit.verdict_table import STUDY_KEYS, VerdictError


class FirstTable(HTMLParser):
    """The cells of the first <table> of a page, row by row (header row first), read with the standard library."""

    def __init__(self):
        super().__init__()
        self.rows, self.cell, self.depth, self.done = [], None, 0, False

    def handle_starttag(self, tag, attrs):
        if self.done:
            return
        if tag == "table":
            self.depth += 1
        elif tag == "tr" and self.depth:
            self.rows.append([])
        elif tag in ("td", "th") and self.depth:
            self.cell = ""

    def handle_endtag(self, tag):
        if tag == "table" and self.depth:
            self.depth -= 1
            self.done = not self.depth
        elif tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell)
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def first_table(page: str) -> pd.DataFrame:
    parser = FirstTable()
    parser.feed(page)
    header, *rows = parser.rows
    return pd.DataFrame(rows, columns=header)


def row(**changes) -> Verdict:
    base = {k: f"{k} text" for k in STUDY_KEYS if k != "controls"} | {"study": "kv"}
    return Verdict(**base | {"controls": Controls(flags=("controls text",))} | changes)


@pytest.mark.parametrize("key", ["fpr", "power", "estimate", "controls"])
def test_a_verdict_without_its_reliability_or_estimate_is_named(key):
    empty = Controls(flags=("  ",)) if key == "controls" else "  "
    with pytest.raises(VerdictError, match=rf"^kv: verdict row 0 \(system text\): '{key}' is empty; expected a "
                                           r"non-empty string"):
        verdict_table.check_rows("kv", [row(**{key: empty})])
    with pytest.raises(VerdictError, match="kv: verdict row 0: 'study' is 'frames', expected 'kv'"):
        verdict_table.check_rows("kv", [row(study="frames")])
    with pytest.raises(VerdictError, match="kv: verdict row 0: a dict; expected a verdict.Verdict"):
        verdict_table.check_rows("kv", [row().cells()])
    assert list(verdict_table.frame(verdict_table.check_rows("kv", [row()])).columns) == list(verdict_table.CSV_COLUMNS)


def test_the_controls_cell_phrases_each_state_once_for_every_study():
    """One spelling per state: a planted control recovered or NOT, a null control not rejected or REJECTED, a
    control not run; flags after them; "not run" when the row has neither."""
    states = (ControlState.positive("positive control", True), ControlState.null("null control", False),
              ControlState.positive("planted", False, " (3 of 4)"), ControlState.null("moving null", True),
              ControlState.null("harmful_twin", None))
    assert Controls(states, ("judge unvalidated",)).text() == (
        "positive control recovered; null control not rejected (as expected); planted NOT recovered (3 of 4); "
        "moving null REJECTED (not as expected); harmful_twin not run; judge unvalidated")
    assert Controls(states[:1], separator=": ").text() == "positive control: recovered"
    assert Controls().text() == "not run"
    assert [s.ok for s in states] == [True, True, False, False, False]
    with pytest.raises(ValueError, match="control 'x' \\(null\\): state 'recovered'"):
        ControlState("x", "null", "recovered")


def test_a_study_without_statistics_or_without_a_table_gets_a_row_saying_why(tmp_path, monkeypatch):
    """A results folder that lacks one study's stats: that study's row says which study and why, the others are
    read, testbeds are marked."""
    p = SimpleNamespace(models={"organism": SimpleNamespace(testbed=True), "plain": SimpleNamespace(testbed=False)})
    study = SimpleNamespace(verdict_rows=lambda p, tables: [row(system="organism", answer=str(len(tables["t"]))),
                                                            row(system="plain")])
    broken = SimpleNamespace(verdict_rows=lambda p, tables: tables["absent"])
    monkeypatch.setattr(studies, "get", {"kv": study, "frames": study, "toy": broken}.__getitem__)
    for name in ("kv", "toy"):
        (tmp_path / name).mkdir()
        pd.DataFrame({"x": [1, 2, 3]}).to_csv(tmp_path / name / "t.csv", index=False)
    p.studies = {"kv": None, "frames": None, "toy": None}
    table = verdict_table.write(p, ["kv", "frames", "toy"], tmp_path)
    assert list(table["system"]) == ["organism (TESTBED)", "plain", "(none)", "(none)"]
    assert table.loc[0, "answer"] == "3"
    assert table.loc[2, "fpr"] == "not computed: no statistics in frames/ (run notebook 05)"
    assert table.loc[3, "power"] == "not computed: its statistics could not be read (KeyError: 'absent')"
    pd.testing.assert_frame_equal(verdict_table.read(tmp_path), table)


def test_the_report_opens_with_the_first_screen_and_the_csv_holds_its_rows(ci_run):
    """On the ci run: every registered study fills every column of its own rows; report.html opens with the
    first screen (every study, one short row per system, its cells at most about 60 characters), the detail table
    is ``stats/verdicts.csv``'s text columns row for row, and the csv's numbers read as floats that agree with
    the text cells."""
    run, *_ = ci_run["kv"]
    run = type(run)(run.p.source_file, "")  # every study of the ci params, on the same folder
    assert run.names == list(studies.REGISTRY)
    page = report.write(run).read_text(encoding="utf-8")
    csv = pd.read_csv(run.dir / "stats" / verdict_table.FILE, dtype=str, keep_default_na=False)
    assert list(csv.columns) == list(verdict_table.CSV_COLUMNS) and set(csv["study"]) == set(studies.REGISTRY)
    assert not csv[list(STUDY_KEYS)].isin([""]).any().any()
    # every study gave its own rows (none is the fallback row of a study whose verdicts could not be read); on
    # these tiny params a cell may say why it cannot be given, but no cell is empty
    assert (csv["system"] != "(none)").all(), csv.loc[csv["system"] == "(none)", ["study", "fpr"]].to_dict("records")
    assert page.index("<table") == page.index("<table class='first-screen'")  # the first table of the page
    report_page.check_first_screen(page, list(studies.REGISTRY))
    report_page.check_numbers(run.dir / "stats" / verdict_table.FILE)
    detail = page[page.index("<table class='verdicts'>"):]
    pd.testing.assert_frame_equal(first_table(detail), csv[list(STUDY_KEYS)])
    # each study with a judge sanity table shows it under its verdicts, its judges by name
    for name in ("kv", "frames", "confusion"):
        sanity = pd.read_csv(run.dir / "stats" / name / "judge_sanity.csv")
        words = page[page.index(f"<h3>{name}</h3>", page.index("<h2>The verdicts in words</h2>")) + 4:]
        words = words[:words.index("<h3>")] if "<h3>" in words else words  # this study's part only
        folded = words[words.index("<summary>judge sanity"):]
        folded = folded[:folded.index("</details>")]
        assert all(f"<td>{j}</td>" in folded for j in sanity.loc[sanity["part"] == "check set", "judge"].unique())
