"""The run's report: ``results/<run>/report.html``, the six executed notebooks in one page, opening
with the first screen (``first_screen``: each study's question, its answers per system in short cells, its
controls once, its headline figure), the papers' headline numbers beside the run's (``papers``), then the
detail table (``verdict_table``: one row per verdict, its estimate, its simulated false-positive rate and
power, its controls; also ``stats/verdicts.csv``), then each study's verdicts
in words as one paragraph (``verdicts(p, tables)`` of the study, from its ``stats/<study>/`` tables: the
sentences its part of notebook 05 ends with), then the three reporting items of every study in the run
(the policy paper's checklist):

1. the contamination check: every study's items against every training pool the project uses
   (normalised exact match and MinHash near-duplicates, ``contamination.audit_pools``); shown open
   for the pools the study's scores rest on (``audited_pools``, and its own training pool), with a
   status naming what the study did, the other pools folded (``contamination_status``);
2. the seed floor, where a study trains anything;
3. the operational definition each score rests on;

and the word TESTBED beside every model organism the run measures.

A study contributes its members of the study interface (``studies.contract.Study``): ``reporting`` (its
operational definitions and seed floor), ``verdict_rows``, ``verdicts``, ``verdict_tables`` (shown under its
verdicts), ``audited_pools`` and, when it trains on prompts, ``training_pool``.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import mistune
import pandas as pd

from . import contamination, datasets, first_screen, judge_sanity, papers, studies, verdict_table
from .config import testbed_note
from .paths import DATA_DIR, ORGANISM_ADAPTER, ROOT

ORGANISM_DATA = ROOT / "organism" / "training_data.csv"
TITLE = "refusal-audit report: run"  # how a run's report opens (a study command's own report.html does not)


def _prompts(texts, prefix: str) -> pd.DataFrame:
    texts = pd.Series(list(texts), dtype=str).drop_duplicates().reset_index(drop=True)
    return pd.DataFrame({"id": [f"{prefix}-{i}" for i in range(len(texts))], "prompt": texts})


def training_pools(p) -> dict[str, pd.DataFrame]:
    """Every pool of prompts the project trained something on: the refusing organism's training
    requests, the learned judges' training requests (XSTest's prompts, whose replies train the refusal
    heads; HarmBench's classifier-validation behaviours, which train the harmful head; the
    hand-written soft refusals), and each study's own (``training_pool``)."""
    pools = {"organism": _prompts(pd.read_csv(ORGANISM_DATA, keep_default_na=False)["prompt"], "org")}
    judge = [pd.read_csv(f, keep_default_na=False)["prompt"] for f in sorted(datasets.XSTEST_COMPLETIONS.glob("*.csv"))]
    judge.append(pd.Series([x["test_case"] for items in json.loads(datasets.HARMBENCH_CLASSIFIER_VAL.read_text()).values()
                            for x in items]))
    judge += [pd.read_csv(f, keep_default_na=False)["prompt"] for f in sorted((DATA_DIR / "soft_refusals").glob("*.csv"))]
    pools["judges"] = _prompts(pd.concat(judge), "judge")
    for name in p.studies:
        pool = studies.get(name).training_pool(p)
        if pool is not None:
            pools[name] = pool
    return pools


def pools_for(p, model_names: list[str], learned_judges: bool, adapters: dict | None = None) -> list[str]:
    """The training pools a study's scores rest on: the refusing organism's when one of ``model_names``
    is the organism, the learned judges' when the study's judges include them, then each pool of
    ``adapters`` (adapter folder -> pool name: a study's own control) whose adapter one of them loads."""
    used = {p.models[n].adapter for n in model_names if n in p.models}
    own = [pool for adapter, pool in (adapters or {}).items() if str(Path(adapter).relative_to(ROOT)) in used]
    return ((["organism"] if str(ORGANISM_ADAPTER.relative_to(ROOT)) in used else [])
            + (["judges"] if learned_judges else []) + own)


def audit(p, items: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-item audit rows, overlap per (study:dataset, pool)) for every study's evaluation items
    (a study's own training rows, ``role == "train"``, are its pool, not items to audit)."""
    items = items[items["role"] != "train"] if "role" in items else items
    evaluation = pd.DataFrame({"id": items["study"] + ":" + items["item_id"].astype(str), "prompt": items["text"],
                               "benchmark": items["study"] + ":" + items["dataset"].astype(str)})
    rows = contamination.audit_pools(training_pools(p), evaluation)
    return rows, contamination.overlap_rates(rows)


def _section(title: str, body: str) -> str:
    return f"<h2>{html.escape(title)}</h2>\n{body}\n"


def _markdown(text: str) -> str:
    return mistune.html(text)


def contamination_status(overlap: pd.DataFrame, study: str, pools: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the rows of ``overlap`` for ``study``'s items against the pools its scores rest on, the rows
    against every other pool), each with a ``status`` that names what the study did: on a pool it
    audits, contaminated items excluded from every statistic (or the dataset excluded when none is
    left); its own training pool (the pool named like the study) is audited by the study itself; any
    other pool is not audited because no score rests on it: its items are kept, whatever the overlap."""
    mine = overlap[overlap["benchmark"].str.startswith(f"{study}:") & (overlap["pool"] != "(any)")].copy()
    audited = mine["pool"].isin(list(pools) + [study])
    own = mine["pool"] == study

    def status(r, own_pool: bool) -> str:
        if r["contaminated"] == 0:
            return "audited: no overlap"
        where = " (by the study, on its own held-out rows)" if own_pool else ""
        if r["n_clean"] == 0:
            return f"audited{where}: every item contaminated, dataset excluded"
        return f"audited{where}: {int(r['contaminated'])} contaminated item(s) excluded from every statistic"

    mine["status"] = [status(r, o) if a else "not audited: no score of this study rests on this pool; items kept"
                      for (_, r), a, o in zip(mine.iterrows(), audited, own)]
    return mine[audited.to_numpy()].reset_index(drop=True), mine[~audited.to_numpy()].reset_index(drop=True)


def study_verdicts(run, name: str) -> list[str]:
    """The study's verdicts in words from its statistics tables (``Study.verdicts``); a line saying why there
    are none when the study states none or its statistics are not computed yet."""
    try:
        tables = run.read_stats(name)
    except FileNotFoundError:
        return ["(not computed: run notebook 05)"]
    return studies.get(name).verdicts(run.p, tables) or ["(no verdict in words: see its part of notebook 05)"]


def verdict_tables(run, name: str) -> list[tuple[str, pd.DataFrame]]:
    """The tables a study shows beside its verdicts (``Study.verdict_tables``; none when its statistics are
    not computed)."""
    try:
        tables = run.read_stats(name)
    except FileNotFoundError:
        return []
    return studies.get(name).verdict_tables(run.p, tables)


def sanity(run, name: str) -> str:
    """The study's judge sanity table (``judge_sanity.shown``), folded under the verdicts: the floors a verdict row's
    judge flags come from, for every judge and model ("" when the study has none)."""
    try:
        table = run.read_stats(name).get("judge_sanity")
    except FileNotFoundError:
        return ""
    if table is None or not len(table):
        return ""
    check, agree = judge_sanity.shown(table)
    fmt = {"index": False, "border": 0}
    return ("<details><summary>judge sanity: each judge on the fixed check set (data/judge_checks/, Wilson interval) "
            "and each pair of judges' kappa on each model's replies (bootstrap over the study's items or paraphrase "
            "clusters); BELOW: under the floor of params judges.sanity. A verdict row is flagged for a judge below a "
            "check-set floor, or below the kappa floor with every other judge (kv: the check set only)</summary>"
            + (check.to_html(**fmt) if len(check) else "") + (agree.to_html(**fmt) if len(agree) else "")
            + "</details>")


def comparisons(run) -> str:
    """The papers' headline numbers (``papers``) beside this run's, one table per study of the params file."""
    p = run.p
    testbeds = {m for m, spec in p.models.items() if spec.testbed}
    parts = []
    for name in p.studies:
        try:
            tables = run.read_stats(name)
        except FileNotFoundError:
            tables = {}
        try:
            measured = studies.get(name).measured(p, tables) if tables else []
        except (KeyError, ValueError, IndexError):  # a table of an older run: its quantities read "not computed"
            measured = []
        try:
            table = papers.compare(p, name, measured, testbeds)
        except papers.PublishedError as err:  # make check refuses the file; the page still renders, saying why
            parts.append(f"<h3>{html.escape(name)}</h3><p>not shown: {html.escape(str(err))}</p>")
            continue
        if len(table):
            parts.append(f"<h3>{html.escape(name)}</h3>"
                         + table.to_html(index=False, classes="published", border=0, justify="left"))
    where = ("a paper params file: each row says whether the run's interval holds the paper's value"
             if papers.is_paper_run(p) else
             "not a paper params file: the run's models are testbeds or other models and settings, so no row is "
             "comparable; each still shows the run's figure for the same quantity")
    return (f"<h2>The papers' numbers and this run's</h2><p>Each seed's headline numbers "
            f"(<code>data/published/</code>, cited there by arXiv id and title) beside the same quantity measured "
            f"by this run; {where}.</p>" + "".join(parts))


def write(run, refresh: bool = True) -> Path:
    """Render ``report.html`` for a finished run (``run``: a ``pipeline.Run``): its verdict table keeps every
    study's rows whatever ran last (``verdict_table.write`` replaces only the run's studies'), and every part of
    the page covers every study of the params file; ``refresh=False`` renders the table as it is (a user's row
    just added, no study run)."""
    from nbconvert import HTMLExporter  # lazy: only a finished run renders its notebooks

    p = run.p
    names = list(p.studies)
    head = [f"<h1>{TITLE} {html.escape(p.run_name)}</h1>",
            f"<p>params: <code>{html.escape(p.source_file)}</code>; studies: {', '.join(names)} (rendered after "
            f"{'a run of ' + ', '.join(run.names) if refresh else 'a user' + chr(39) + 's system was added'}; each "
            "block says when it was computed)</p>"]
    testbeds = testbed_note(p, list(p.models))  # the sentence every caption and notebook summary opens with
    if testbeds:
        word, rest = testbeds.split(":", 1)
        head.append(f"<p class='testbed'><b>{word}</b>:{html.escape(rest)}</p>")
    overlap_file = run.dir / "contamination.csv"
    overlap = pd.read_csv(overlap_file) if overlap_file.is_file() else None
    table = verdict_table.write(p, run.names, run.dir / "stats") if refresh else verdict_table.read(run.dir / "stats")
    questions = {n: studies.get(n).question for n in names}
    figures = {n: studies.get(n).headline_figure for n in names}
    head.append(first_screen.render(table, names, questions, run.dir / "figures", figures))
    head.append(comparisons(run))
    legend = "".join(f"<li><b>{html.escape(k)}</b>: {html.escape(v)}</li>" for k, v in verdict_table.COLUMNS.items())
    legend += "".join(f"<li><b>{html.escape(k)}</b> (a number): {html.escape(v)}</li>"
                      for k, (v, _) in verdict_table.NUMBER_COLUMNS.items())
    head.append("<h2>The detail table</h2><details><summary>every row, every field (also "
                f"<code>stats/{verdict_table.FILE}</code>, with the numbers as typed columns)</summary>"
                + verdict_table.to_html(table) + f"<ul>{legend}</ul></details>")
    head.append("<h2>The verdicts in words</h2>")
    for name in names:
        head.append(f"<h3>{html.escape(name)}</h3>\n" + _markdown(" ".join(study_verdicts(run, name))))
        head += [f"<p>{html.escape(title)}</p>" + df.to_html(float_format=lambda x: f"{x:.3f}", index=False)
                 for title, df in verdict_tables(run, name)]
        head.append(sanity(run, name))
    fmt = {"float_format": lambda x: f"{x:.3f}", "index": False}
    for name in names:
        study = studies.get(name)
        items = study.reporting(p)
        if overlap is None:
            check = "<p>not computed (run notebook 01)</p>"
        else:
            pools = study.audited_pools(p)
            shown, folded = contamination_status(overlap, name, pools)
            check = (f"<p>pools its scores rest on: {html.escape(', '.join(dict.fromkeys(pools + [name])))}</p>" +
                     (shown.to_html(**fmt) if len(shown) else "<p>no item against these pools</p>"))
            if len(folded):
                check += (f"<details><summary>other pools ({html.escape(', '.join(folded['pool'].unique()))}): "
                          "not audited, items kept</summary>" + folded.to_html(**fmt) + "</details>")
        head.append(_section(f"{name}: 1. contamination check (items against every training pool)", check))
        head.append(_section(f"{name}: 2. seed floor", _markdown(items.seed_floor)))
        head.append(_section(f"{name}: 3. operational definitions", _markdown(items.definition)))
    head.append("<h2>The headline figures</h2>" + first_screen.full_figures(run.dir / "figures", figures))
    exporter = HTMLExporter(template_name="basic")
    bodies = [f"<hr><p>The notebooks below are those of the last run, of {html.escape(', '.join(run.names))}.</p>"]
    for nb in sorted((run.dir / "notebooks").glob("0*.ipynb")):
        body, _ = exporter.from_filename(str(nb))
        bodies.append(f"<hr><h1>{html.escape(nb.stem)}</h1>\n<div class='notebook'>{body}</div>")
    style = ("<style>body{font-family:sans-serif;max-width:1100px;margin:auto} table{border-collapse:collapse;"
             "font-size:12px} td,th{border:1px solid #ccc;padding:2px 6px;vertical-align:top} "
             ".testbed{background:#fff3cd;padding:6px} h1{font-size:20px;margin:6px 0}"
             f" img{{max-width:100%}} .notebook{{overflow-x:auto}} {first_screen.STYLE}</style>")
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(p.run_name)}</title>{style}</head>" \
           f"<body>{''.join(head)}{''.join(bodies)}</body></html>"
    path = run.dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path
