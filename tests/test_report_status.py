"""report.html: the contamination table's status names what each study did with each pool, and the
page opens with every study's verdicts in words."""
from __future__ import annotations

import types

import pandas as pd

from refusal_audit import contamination, report
from refusal_audit.studies.contract import Reporting
from refusal_audit.studies.frames.paper import MEASURES as FRAMES_MEASURES


def _overlap() -> pd.DataFrame:
    audit = pd.DataFrame({
        "id": ["frames:1", "frames:2", "frames:1", "frames:2", "policy:x", "policy:y", "policy:x", "policy:y"],
        "benchmark": ["frames:xstest"] * 4 + ["policy:harmbench"] * 4,
        "pool": ["organism", "organism", "policy", "policy", "policy", "policy", "judges", "judges"],
        "exact": [False, False, True, True, True, False, False, False],
        "near_duplicate": [False] * 8,
        "contaminated": [False, False, True, True, True, False, False, False]})
    return contamination.overlap_rates(audit)


def test_a_pool_the_study_does_not_audit_is_folded_and_says_items_kept():
    shown, folded = report.contamination_status(_overlap(), "frames", ["organism"])
    assert shown["pool"].tolist() == ["organism"] and shown["status"].tolist() == ["audited: no overlap"]
    # frames' items are all in the policy study's pool, which frames never uses: kept, not "excluded"
    assert folded["pool"].tolist() == ["policy"]
    assert folded["status"].iloc[0].startswith("not audited") and "items kept" in folded["status"].iloc[0]
    assert not folded["status"].str.contains("excluded").any()


def test_the_study_own_pool_is_audited_by_the_study():
    shown, folded = report.contamination_status(_overlap(), "policy", [])
    assert shown["pool"].tolist() == ["policy"]
    assert shown["status"].iloc[0] == ("audited (by the study, on its own held-out rows): 1 contaminated item(s) "
                                       "excluded from every statistic")
    assert folded["pool"].tolist() == ["judges"]
    every, _ = report.contamination_status(_overlap(), "frames", ["policy"])
    assert every["status"].tolist() == ["audited: every item contaminated, dataset excluded"]


def test_verdicts_come_from_the_study_or_say_why_not(tmp_path, monkeypatch):
    class Run:
        p = types.SimpleNamespace()

        def read_stats(self, name):
            if name == "missing":
                raise FileNotFoundError(name)
            return {"t": pd.DataFrame({"x": [1]})}

    with_verdicts = types.SimpleNamespace(verdicts=lambda p, tables: [f"{len(tables['t'])} row: verdict"])
    modules = {"a": with_verdicts, "b": types.SimpleNamespace(verdicts=lambda p, tables: []), "missing": with_verdicts}
    monkeypatch.setattr(report.studies, "get", lambda name: modules[name])
    assert report.study_verdicts(Run(), "a") == ["1 row: verdict"]
    assert "no verdict in words" in report.study_verdicts(Run(), "b")[0]
    assert "run notebook 05" in report.study_verdicts(Run(), "missing")[0]


def test_the_page_opens_with_the_verdict_table_then_the_sentences_then_the_audited_pools(tmp_path, monkeypatch):
    _overlap().to_csv(tmp_path / "contamination.csv", index=False)
    (tmp_path / "notebooks").mkdir()
    study = types.SimpleNamespace(verdicts=lambda p, tables: ["frames recovered its planted effect"],
                                  verdict_tables=lambda p, tables: [], audited_pools=lambda p: ["organism"],
                                  reporting=lambda p: Reporting("d", "s"), question="Does it?", headline_figure="",
                                  measured=lambda p, tables: [], measures=FRAMES_MEASURES)
    monkeypatch.setattr(report.studies, "get", lambda name: study)
    run = types.SimpleNamespace(p=types.SimpleNamespace(models={}, run_name="r", source_file="x.yaml",
                                                        studies={"frames": None}),
                                names=["frames"], dir=tmp_path, read_stats=lambda name: {})
    page = report.write(run).read_text()
    # the first screen (this study has no statistics: its row says so), the papers' numbers beside the run's
    # (none measured), the detail table, then the sentences, then the pools
    assert page.index("frames: Does it?") < page.index("The papers' numbers and this run's") \
        < page.index("<table class='verdicts'>") < page.index("frames recovered its planted effect") \
        < page.index("frames: 1. contamination check")
    assert "not computed: no statistics in frames/ (run notebook 05)" in page
    assert "not computed by this run" in page
    details = page.index("<details>", page.index("frames: 1. contamination check"))
    assert page.index("audited: no overlap") < details < page.index("not audited")
