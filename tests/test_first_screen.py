"""The report's first screen and the typed verdict table behind it: one short row per system for each study's
primary question, the controls once, TESTBED marked; ``stats/verdicts.csv`` with numbers pandas reads as
floats, each empty one saying why; one table per run whatever ran last (a study run alone replaces only its own
rows, a user's guard adds its own)."""
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import report_page

from refusal_audit import config, first_screen, pipeline, studies, verdict_table
from refusal_audit.paths import PARAMS_DIR
from refusal_audit.studies.policy.following import DIRECTIONS
from refusal_audit.verdict import NULL, POSITIVE, PRIMARY, USER, Controls, ControlState, Verdict, not_applicable

NAMES = list(studies.REGISTRY)
LONG = ("+0.92 [+0.75, +1.00] (keyword - learned_refusal drop, sink_tail@0, n = 12); reference drop +0.00 "
        "[+0.00, +0.00] against margin 0.35; claim Holm p 0.022")
CONTROLS = Controls((ControlState.positive("positive control", True), ControlState.null("null control", False),
                     ControlState.null("moving null", False)), ("judge unvalidated: its wrapper was not checked",))


def verdict(study: str, system: str, role: str = PRIMARY, **numbers) -> Verdict:
    return Verdict(study, system, role, f"{study}: a question?", "an answer", numbers.pop("estimate", LONG),
                   "0.1% (worst of 3 null scenarios, 2000 simulated runs)", "MDE +0.667 (8 of 12 prompts)", CONTROLS,
                   **numbers)


def rows_of(study: str) -> list[Verdict]:
    """A study's rows: two systems for the primary question (one a testbed), a control, a row marked off."""
    return [verdict(study, "model-a", effect=0.917, ci_low=0.75, ci_high=1.0, p=0.022, fpr_rate=0.001,
                    power_rate=0.19, n=12, testbed=True),
            verdict(study, "model-b", effect=0.0, ci_low=0.0, ci_high=0.0, p=1.0, fpr_rate=0.001, mde=0.667, n=12,
                    estimate="+0.00 [+0.00, +0.00] (keyword - learned_refusal drop); claim Holm p 1"),
            verdict(study, "moving null (simulated)", NULL, effect=-0.08, ci_low=-0.42, ci_high=0.25, p=1.0,
                    estimate="-0.08 [-0.42, +0.25] (keyword - learned_refusal drop); claim Holm p 1"),
            verdict(study, "planted", POSITIVE, estimate=not_applicable("a deterministic check"))]


def params():
    return SimpleNamespace(studies={n: None for n in NAMES}, models={})


def test_the_csv_gives_floats_and_says_why_a_number_is_empty(tmp_path):
    table = verdict_table.save(params(), verdict_table.frame(rows_of(NAMES[0]), "then", "abc"), tmp_path)
    back = pd.read_csv(tmp_path / verdict_table.FILE)
    assert [back[k].dtype.kind for k in verdict_table.NUMBERS] == ["f"] * len(verdict_table.NUMBERS)
    assert back.loc[0, "p"] == pytest.approx(0.022) and back.loc[0, "ci_low"] == pytest.approx(0.75)
    assert pd.isna(back.loc[0, "mde"]) and back.loc[0, "empty_numbers"] == (
        "mde: the answer found its effect (its power_rate is given)")
    assert back.loc[1, "empty_numbers"] == "power_rate: a null answer (its mde is given)"
    assert "effect: not applicable: a deterministic check" in back.loc[3, "empty_numbers"]
    assert back.loc[0, "system"] == "model-a (TESTBED)" and bool(back.loc[0, "testbed"])
    assert back.loc[0, "controls_summary"] == "positive control recovered; 2 null controls not rejected; judge unvalidated"
    pd.testing.assert_frame_equal(verdict_table.read(tmp_path), table)
    report_page.check_numbers(tmp_path / verdict_table.FILE)


def test_a_number_that_disagrees_with_its_text_is_caught(tmp_path):
    wrong = verdict(NAMES[0], "model-a", effect=0.9, ci_low=0.5, ci_high=1.0, p=0.022)  # the text says [+0.75, +1.00]
    verdict_table.save(params(), verdict_table.frame([wrong]), tmp_path)
    with pytest.raises(AssertionError, match="model-a"):
        report_page.check_numbers(tmp_path / verdict_table.FILE)


def test_a_study_run_alone_keeps_the_others_rows_and_a_users_guard_adds_its_own(tmp_path):
    p = params()
    verdict_table.save(p, verdict_table.frame([r for n in NAMES for r in rows_of(n)], "first", "c1"), tmp_path)
    last = NAMES[-1]
    rerun = [verdict(last, "model-c", effect=0.5, ci_low=0.1, ci_high=0.9, p=0.04)]
    table = verdict_table.save(p, verdict_table.frame(rerun, "second", "c2"), tmp_path)
    assert list(dict.fromkeys(table["study"])) == NAMES  # every study kept, in the params' order
    assert list(table.loc[table["study"] == last, "system"]) == ["model-c"]
    assert set(table.loc[table["study"] != last, "computed"]) == {"first"}
    guard = [verdict(last, "my-guard", USER, headline=True)]
    verdict_table.add(p, guard, tmp_path)
    table = verdict_table.add(p, [verdict(last, "my-guard", USER, headline=True, n=7)], tmp_path)  # again: replaced
    assert list(table.loc[table["role"] == USER, "n"]) == [7.0]
    assert list(table.loc[table["study"] == last, "system"]) == ["model-c", "my-guard"]
    again = verdict_table.save(p, verdict_table.frame(rerun, "third", "c3"), tmp_path)  # the study rerun keeps the guard
    assert list(again.loc[again["study"] == last, "system"]) == ["model-c", "my-guard"]


def test_the_first_screen_shows_each_studys_primary_rows_in_short_cells(tmp_path):
    rows = [r for n in NAMES[:-1] for r in rows_of(n)]
    rows[0] = verdict(NAMES[0], "model-a", effect=0.917, ci_low=0.75, ci_high=1.0, p=0.022, fpr_rate=0.001,
                      power_rate=0.19, n=12, testbed=True, headline=True, label="keyword")
    table = verdict_table.frame(rows, "now", "abcdef1234567890")
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "head.png").write_bytes(b"\x89PNG fake")
    page = (first_screen.render(table, NAMES, {NAMES[0]: "Is it so?"}, figures, {NAMES[0]: "head"})
            + "<table class='verdicts'></table>")
    tables = report_page.check_first_screen(page, NAMES[:-1], missing=NAMES[-1:])
    first = tables[NAMES[0]]  # the one row its study marks, with its part
    assert first.to_dict("records") == [{"system": "model-a TESTBED", "part": "keyword", "answer": "an answer",
                                         "estimate": "+0.92 [+0.75, +1.00]", "p": "0.022", "fpr": "0.1%",
                                         "power": "0.19", "n": "12"}]
    second = tables[NAMES[1]]  # no row marked: its primary rows; a null answer shows its MDE
    assert list(second["system"]) == ["model-a TESTBED", "model-b"] and list(second["power"]) == ["0.19", "MDE 0.67"]
    marked = verdict_table.frame([rows_of(NAMES[0])[1], verdict(NAMES[0], "model-c", POSITIVE, headline=True),
                                  verdict(NAMES[0], "model-b", headline=True)])  # the control is shown as one
    shown = report_page.first_screen_tables(first_screen.render(marked, NAMES[:1], {}, figures, {}))[NAMES[0]]
    assert list(shown["system"]) == ["model-c positive control", "model-b"]
    assert "part" not in second
    assert page.count("<b>controls</b>") == len(NAMES) - 1  # once per study
    assert "2 null controls not rejected; judge unvalidated</p>" in page
    assert f"title='{LONG}'" in page  # the whole sentence is the estimate's tooltip
    assert "href='#fig-" + NAMES[0] + "'" in page and "data:image/png;base64," in page
    assert "not computed: no row of this study in stats/verdicts.csv" in page  # the study whose statistics are absent
    assert "computed now at commit abcdef123456" in page


def test_the_first_screen_check_fails_on_a_long_cell_or_a_system_twice():
    table = verdict_table.frame(rows_of(NAMES[0]))
    page = first_screen.render(table, NAMES[:1], {}, Path("/nonexistent"), {}) + "<table class='verdicts'></table>"
    report_page.check_first_screen(page, NAMES[:1])
    with pytest.raises(AssertionError, match="cells over"):
        report_page.check_first_screen(page.replace("an answer", "x" * 80), NAMES[:1])
    with pytest.raises(AssertionError, match="a system twice"):
        report_page.check_first_screen(page.replace("model-b", "model-a"), NAMES[:1])
    with pytest.raises(AssertionError, match="no block"):
        report_page.check_first_screen(page, NAMES[:2])  # a study missing from the screen


def test_short_cells_keep_the_head_of_a_sentence():
    assert first_screen.short("follows intents (judge keyword)") == "follows intents"
    assert first_screen.short("A +0.62 [+0.32, +1.08]; B +0.23 [-0.11, +0.47] (position)") == (
        "A +0.62 [+0.32, +1.08]; B +0.23 [-0.11, +0.47]")
    assert len(first_screen.short("y" * 200)) == first_screen.MAX_CELL


def test_a_users_guard_reaches_the_runs_table_beside_every_study(tmp_path, monkeypatch):
    """``make guard-verdict`` (the policy study's command) on a finished run: the guard's row, role "user's
    system", joins the run's verdict table and every study's rows stay."""
    p = config.load(PARAMS_DIR / "default.yaml")
    stats = tmp_path / "stats"
    verdict_table.save(p, verdict_table.frame([r for n in NAMES for r in rows_of(n)]), stats)
    guard = {"guard": "my-guard", "kind": "user", "last_signal": "", "follows": "A", "n_disputed": 40,
             "names_own_signal": "", **{f"{k}_{d}": v for d in DIRECTIONS
                                         for k, v in (("n", 20), ("pos", 0.9))},
             **{f"pos_{d}_{e}": v for d in DIRECTIONS for e, v in (("lo", 0.8), ("hi", 1.0))}}
    pd.DataFrame([guard]).to_csv(tmp_path / "guard_verdict.csv", index=False)
    monkeypatch.setattr(pipeline, "run_dir", lambda name: tmp_path)
    lines = pipeline.add_user_rows("policy", "elsewhere", str(PARAMS_DIR / "default.yaml"))
    assert lines == [f"added 1 row(s) to {stats / verdict_table.FILE} (my-guard)"]
    table = verdict_table.read(stats)
    assert list(dict.fromkeys(table["study"])) == NAMES
    mine = table[table["role"] == USER]
    assert list(mine["system"]) == ["my-guard"] and list(mine["answer"]) == ["follows A"] and mine["headline"].all()
    assert len(table) == len(NAMES) * len(rows_of(NAMES[0])) + 1
    assert pipeline.add_user_rows("kv", "elsewhere", str(PARAMS_DIR / "default.yaml")) == []  # nothing brought


def test_a_users_corpus_without_its_null_test_is_a_row_per_system_and_judge_said_not_computed(tmp_path):
    """``make confusion`` on a user's clusters: one row per system and judge; a summary without the null test's
    table (confusion_nulls.csv) gives no verdict word: each row says it was not computed and why, never a bare rate
    (the verdict with its null is tested on a user's corpus in test_confusion_user_verdict)."""
    p = config.load(PARAMS_DIR / "default.yaml")
    pd.DataFrame([{"model": "mine", "judge": "keyword", "n_prompts": 30, "n_rejected": 6, "frr": 0.2,
                   "confusion_rate": 0.5, "confusion_rate_lo": 0.2, "confusion_rate_hi": 0.8},
                  {"model": "mine", "judge": "learned_refusal", "n_prompts": 30, "n_rejected": 0, "frr": 0.0,
                   "confusion_rate": 0.0, "confusion_rate_lo": float("nan"), "confusion_rate_hi": float("nan")}]
                 ).to_csv(tmp_path / "confusion_summary.csv", index=False)
    rows = studies.get("confusion").user_rows(p, tmp_path)
    assert [(r.role, r.label, r.effect, r.n) for r in rows] == [
        (USER, "keyword", None, None), (USER, "learned_refusal", None, None)]
    assert all("no nulls table" in r.answer for r in rows)
    verdict_table.add(p, rows, tmp_path / "stats")
    report_page.check_numbers(tmp_path / "stats" / verdict_table.FILE)
