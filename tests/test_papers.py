"""The papers' headline numbers (``data/published/``, ``papers``): stored once per study, refused by ``make check``
when a file names an unknown study, lacks a value or names a quantity its study does not measure; printed beside
the run's own measurement, compared only for a paper params file, TESTBED and not comparable otherwise."""
import contextlib
import io
from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from refusal_audit import __main__ as cli
from refusal_audit import config, papers, studies
from refusal_audit.paths import PARAMS_DIR
from refusal_audit.studies.contract import Measurement

KV = "kv"
HEADER = ",".join(papers.COLUMNS)


def test_every_study_stores_its_papers_numbers_and_every_file_is_valid():
    assert papers.check() == []
    for name in studies.REGISTRY:
        table = papers.read(name)
        assert len(table), f"{name}: no published number"
        assert set(table["quantity"]) <= set(studies.get(name).measures)


def test_a_bad_file_is_refused_with_the_file_and_the_row(tmp_path, monkeypatch):
    (tmp_path / "nosuch.csv").write_text(f"{HEADER}\nx,y,1,,,%,s,p\n")
    (tmp_path / f"{KV}.csv").write_text(
        f"{HEADER}\nkeyword_refusal_full,Qwen,98.0,,,%,arXiv 1,p. 3\nkeyword_refusal_evicted,Qwen,,,,%,arXiv 1,p. 3\n"
        "made_up,Qwen,1,,,%,arXiv 1,p. 3\nmmlu_full,Qwen,50,,,points,arXiv 1,p. 4\nmmlu_evicted,Qwen,50,,,%,,p. 4\n")
    problems = papers.check(tmp_path)
    kv = tmp_path / f"{KV}.csv"
    assert problems == [
        f"{kv}: row 3 (keyword_refusal_evicted): no value (give the value, or the range the paper states as low and high)",
        f"{kv}: row 4 (made_up): quantity 'made_up' is not one the kv study measures ({', '.join(studies.get(KV).measures)})",
        f"{kv}: row 5 (mmlu_full): unit 'points'; the kv study measures it in '%'",
        f"{kv}: row 6 (mmlu_evicted): seed is empty",
        f"{tmp_path / 'nosuch.csv'}: unknown study 'nosuch' (the file is named after a registered study: "
        f"{', '.join(studies.REGISTRY)})"]
    monkeypatch.setattr(papers, "FOLDER", tmp_path)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert cli.main(["check", str(PARAMS_DIR / "default.yaml")]) == 2
    assert "published numbers: " in err.getvalue() and "row 4 (made_up)" in err.getvalue()


def run(paper: bool, testbed: bool = False):
    where = PARAMS_DIR / ("paper/x.yaml" if paper else "default.yaml")
    spec = SimpleNamespace(source="Qwen/Qwen2.5-3B-Instruct", testbed=testbed)
    return SimpleNamespace(source_file=str(where), models={"qwen": spec, "other": SimpleNamespace(source="o")})


def test_the_run_stands_beside_the_paper_and_says_whether_its_interval_holds_it():
    measured = [Measurement("keyword_refusal_full", "other", 10.0, 5.0, 20.0),
                Measurement("keyword_refusal_full", "qwen", 97.0, 94.0, 99.0, "judge keyword"),
                Measurement("keyword_refusal_evicted", "qwen", 95.0, 90.0, 98.0)]
    table = papers.compare(run(paper=True), KV, measured, set()).set_index("quantity")
    row = table.loc["keyword_refusal_full"]  # the paper's Qwen2.5-3B-Instruct is the run's "qwen" (its source)
    assert (row["run's system"], row["this run"], row["comparison"]) == ("qwen", "97 [94, 99] % (judge keyword)",
                                                                        "holds the paper's value")
    assert table.loc["keyword_refusal_evicted", "comparison"] == "outside"  # 80.5 is not in [90, 98]
    assert table.loc["mmlu_full", "comparison"] == "not computed"
    assert table.loc["keyword_refusal_full", "paper"] == "98 %"
    testbed = papers.compare(run(paper=True), KV, measured, {"qwen"}).set_index("quantity")
    assert testbed.loc["keyword_refusal_full", "comparison"] == papers.NOT_COMPARABLE
    default = papers.compare(run(paper=False), KV, measured, set()).set_index("quantity")
    assert default.loc["keyword_refusal_full", "comparison"].startswith("not comparable")
    assert default.loc["keyword_refusal_full", "this run"].startswith("97 [94, 99] %")  # still shown


def test_make_plan_for_a_paper_file_lists_the_quantities_it_will_compare():
    p = config.load(PARAMS_DIR / "paper" / "kv_qwen2.5-3b-instruct.yaml")
    lines = papers.plan_lines(p)
    assert "a paper params file: each says whether the run's interval holds it" in lines[1]
    assert "  kv: keyword_refusal_evicted = 80.5 % (Qwen2.5-3B-Instruct)" in lines
    assert len(lines) == 2 + len(papers.read(KV))


def test_the_kv_study_measures_its_papers_quantities_at_its_main_condition():
    p = config.load(PARAMS_DIR / "default.yaml")
    kv = p.studies[KV]
    base = {"model": "m", "role": "harmful", "filler_tokens": kv.filler_tokens, "system_prompt": True, "n": 12}
    rates = pd.DataFrame([{**base, "judge": "keyword", "arm": "full", "rate": 0.75, "ci_lo": 0.5, "ci_hi": 0.9},
                          {**base, "judge": "keyword", "arm": "sink_tail", "rate": 0.5, "ci_lo": 0.2, "ci_hi": 0.8},
                          {**base, "judge": "keyword", "arm": "sink_tail", "rate": 0.1, "ci_lo": 0, "ci_hi": 0.3,
                           "filler_tokens": 0}])  # another filler length: not the paper's condition
    measured = studies.get(KV).measured(p, {"refusal_rates": rates})
    assert [(m.quantity, m.value, m.low, m.high) for m in measured] == [
        ("keyword_refusal_full", 75.0, 50.0, 90.0), ("keyword_refusal_evicted", 50.0, 20.0, 80.0)]
    assert all(Path(papers.FOLDER / f"{n}.csv").is_file() for n in studies.REGISTRY)
