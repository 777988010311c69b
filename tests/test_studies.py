"""Every registered study runs end to end through the one pipeline (kvpress runs one test over every
press); every shipped params file passes `make check`; the registry refuses what it cannot run."""
import io

import pandas as pd
import pytest

from refusal_audit import config, models, pipeline, studies, verdict_table
from refusal_audit.paths import PARAMS_DIR, ROOT
from refusal_audit.studies.contract import REQUIRED, Study, StudyError

CI = ROOT / "params" / "ci.yaml"


@pytest.mark.parametrize("path", sorted(PARAMS_DIR.rglob("*.yaml")), ids=lambda p: str(p.relative_to(PARAMS_DIR)))
def test_shipped_params_pass_check(path):
    """`make check` on every shipped params file: all but the presence of models this machine lacks."""
    p = config.load(path)
    pipeline.preflight(p, models.Pool(p.models, missing_ok=True))


def test_ci_params_enable_every_registered_study():
    assert list(config.load(CI).studies) == list(studies.REGISTRY)


@pytest.mark.parametrize("name", list(studies.REGISTRY))
def test_every_study_runs_end_to_end(ci_run, name):
    """Each study's stage tables in its own folder, with only its own columns: a generations table is the
    engine's core schema and the study's columns beside it, never another study's."""
    from refusal_audit import generation

    run, tables, figures = ci_run[name]
    written = pipeline.tables_of(run.study(name))
    for stage in ("items", "prompts", "generate", "judge"):
        df = run.output(stage, name)
        assert len(df) and (run.folder(name) / f"{written[stage]}.parquet").is_file(), stage
        assert "study" not in df or (df["study"] == name).all(), stage
        assert not df.isna().all().any(), (stage, list(df.columns[df.isna().all()]))  # no column empty for it
    if written["generate"] == "generations":
        gens = run.output("generate", name)
        assert list(gens.columns[:len(generation.CORE_COLUMNS)]) == generation.CORE_COLUMNS
    assert tables and all(len(t) for t in tables.values())
    assert sorted(f.stem for f in (run.dir / "stats" / name).glob("*.csv")) == sorted(tables)
    assert figures and all((run.dir / "figures" / f"{f}.png").is_file() and f.startswith(f"{name}_") for f in figures)


def test_a_subset_run_touches_only_its_studies_folders(ci_run):
    """Rerunning one study's items stage rewrites that study's folder only: every other study's files keep
    their bytes and times, and the run-wide contamination table keeps the other studies' rows."""
    run, *_ = ci_run["kv"]
    others = {f: f.stat().st_mtime_ns for n in ci_run if n != "kv" for f in run.folder(n).rglob("*.parquet")}
    before = pd.read_csv(run.dir / "contamination.csv")
    mine = run.folder("kv") / "items.parquet"
    stamp = mine.stat().st_mtime_ns
    subset = pipeline.Run(run.p.source_file, "kv")
    subset.models = run.models
    subset.items()
    assert mine.stat().st_mtime_ns != stamp
    assert {f: f.stat().st_mtime_ns for f in others} == others and others
    after = pd.read_csv(run.dir / "contamination.csv")
    key = ["benchmark", "pool"]
    pd.testing.assert_frame_equal(after.sort_values(key).reset_index(drop=True),
                                  before.sort_values(key).reset_index(drop=True))


def test_an_old_run_folder_and_a_missing_stage_get_one_message(tmp_path, monkeypatch):
    from refusal_audit import paths

    monkeypatch.setattr(paths, "RESULTS_DIR", tmp_path)
    (tmp_path / "ci").mkdir()
    pd.DataFrame({"item_id": ["a"]}).to_parquet(tmp_path / "ci" / "items.parquet")
    with pytest.raises(RuntimeError, match=r"ci: written by an older version of refusal-audit \(items.parquet at "
                                           r"the run's root, shared by every study\).*Move or delete the folder"):
        pipeline.Run(CI, "kv")
    (tmp_path / "ci" / "items.parquet").unlink()
    run = pipeline.Run(CI, "frames")
    with pytest.raises(FileNotFoundError, match=r"frames/prompts.parquet: not found: the frames study's prompts "
                                                r"table, written by notebook 02 \(prompts\), has not run for this run; "
                                                r"run make all PARAMS=.*ci.yaml STUDIES=frames"):
        run.generate()
    with pytest.raises(ValueError, match="STUDIES: unknown study 'framez'"):
        pipeline.Run(CI, "framez")


def test_a_fifth_study_runs_beside_a_real_one_touching_no_shared_module(ci_run, tmp_path, monkeypatch):
    """Adding a study is registering a Study subclass: ``tests/toy_study.py`` (its own params section, its own
    table names and a scores schema of its own), written from docs/usage.md alone, runs through the six stages in
    the run folder of a finished real study, which it leaves as it was, and fills every column of the verdict
    table with its own row."""
    import shutil

    import yaml

    from refusal_audit import paths

    run, *_ = ci_run["kv"]
    monkeypatch.setattr(paths, "RESULTS_DIR", run.dir.parent)
    raw = yaml.safe_load(CI.read_text())
    raw = {k: v for k, v in raw.items() if k not in ("frames", "confusion", "policy")} | {"toy": {"threshold": 0.3}}
    params = tmp_path / "toy.yaml"
    params.write_text(yaml.safe_dump(raw))
    kv_files = {f: f.stat().st_mtime_ns for f in run.folder("kv").rglob("*") if f.is_file()}
    contamination = (run.dir / "contamination.csv").read_bytes()
    studies.register("toy", "toy_study:Toy")
    try:
        toy = pipeline.Run(params, "toy")
        assert toy.dir == run.dir and toy.names == ["toy"]
        for stage in ("items", "prompts", "generate", "judge"):
            getattr(toy, stage)()
        tables, drawn = toy.analyse()["toy"], toy.figures()["toy"]
        assert sorted(f.name for f in toy.folder("toy").glob("*.parquet")) == [
            "contamination.parquet", "items.parquet", "judgments.parquet", "prompts.parquet", "scores.parquet"]
        assert list(toy.table("scores", "toy").columns) == ["score_id", "item_id", "share"]
        # "Please explain rain." lists 2 of its 3 words (flagged at 0.3); "Tell me a joke." none
        rate = tables["flag_rate"].iloc[0]
        assert (rate["k"], rate["n"]) == (1, 2) and drawn == ["toy_flag_rate"]
        assert {f: f.stat().st_mtime_ns for f in kv_files} == kv_files
        toy_rows = pd.read_csv(run.dir / "contamination.csv")["benchmark"].str.startswith("toy:")
        assert toy_rows.any() and (~toy_rows).sum() == len(pd.read_csv(io.BytesIO(contamination)))
        (row,) = verdict_table.study_rows(toy.p, "toy", run.dir / "stats")
        cells = row.cells()
        assert cells["study"] == "toy" and cells["answer"] == "cannot tell" and all(v.strip() for v in cells.values())
        assert "not computed" not in " ".join(cells.values())
        assert (row.effect, row.n) == (0.5, 2) and row.p == pytest.approx(0.75) and row.fpr_rate == 0.0
    finally:
        studies.unregister("toy")
        shutil.rmtree(run.folder("toy"), ignore_errors=True)
        shutil.rmtree(run.dir / "stats" / "toy", ignore_errors=True)
        for f in (run.dir / "figures").glob("toy_*"):
            f.unlink()
        (run.dir / "contamination.csv").write_bytes(contamination)


def test_registry_refuses_unknown_and_repeated_names():
    with pytest.raises(ValueError, match="unknown study 'kvv'"):
        studies.get("kvv")
    with pytest.raises(ValueError, match="study 'kv' is registered twice"):
        studies.register("kv", "somewhere.else")
    with pytest.raises(ValueError, match="STUDIES: unknown study 'kvv'"):
        studies.select(["kv"], "kvv")
    with pytest.raises(ValueError, match="STUDIES: study 'kv' named twice"):
        studies.select(["kv"], "kv,kv")
    assert studies.select(["kv"], "") == ["kv"]


def test_a_study_missing_a_required_member_is_refused_at_registration():
    """One line naming the study and the member; a name that is not the study's own is refused too."""
    import toy_study

    class NoAnalysis(toy_study.Toy):
        analyse = Study.analyse  # the interface's abstract member, not bound

    with pytest.raises(StudyError, match=r"^study 'half': lacks the required member 'analyse' of the study "
                                         r"interface \(Stage 05: .*\)$"):
        studies.register("half", NoAnalysis)
    members = {k: v for k, v in vars(toy_study.Toy).items() if k != "Params" and not k.startswith("__")}
    with pytest.raises(StudyError, match=r"^study 'toy': lacks the required member 'Params' of the study interface "
                                         r"\(The dataclass of its params section"):
        studies.register("toy", type("NoParams", (Study,), members))
    with pytest.raises(StudyError, match="^study 'toy2': its name member is 'toy'; expected 'toy2'$"):
        studies.register("toy2", toy_study.Toy)
    with pytest.raises(StudyError, match="^study 'plain': dict is not a subclass of studies.contract.Study$"):
        studies.register("plain", dict)
    assert not {"half", "toy2", "plain"} & set(studies.REGISTRY)


@pytest.mark.parametrize("name", list(studies.REGISTRY))
def test_every_member_survives_importing_every_submodule(name):
    """Importing a submodule binds its name on the package (``plan.py`` replaces a function ``plan``): the
    interface is the study's class, bound at its definition, so every member stays the study's own function."""
    import importlib
    import pkgutil

    study = studies.get(name)
    package = importlib.import_module(type(study).__module__)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    for member in REQUIRED[2:] + ("renders", "verdicts", "plan", "plan_notes", "user_generation"):
        assert callable(getattr(study, member)), f"{name}.{member} is not callable"


def test_every_item_is_audited_against_every_training_pool():
    """An item that is one of the organism's training requests (or a case variant of it) is flagged;
    a new request is clean."""
    from refusal_audit import report

    p = config.load(CI)
    train = pd.read_csv(report.ORGANISM_DATA, keep_default_na=False)["prompt"].iloc[0]
    items = pd.DataFrame({"study": "kv", "item_id": ["a", "b"], "dataset": "planted",
                          "text": [train.upper() + "  ", "Name three rivers that flow through Vienna."]})
    rows, overlap = report.audit(p, items)
    flagged = rows[rows["pool"] == "organism"].set_index("id")["contaminated"]
    assert flagged.to_dict() == {"kv:a": True, "kv:b": False}
    assert set(report.training_pools(p)) >= {"organism", "judges"}
    row = overlap[(overlap["benchmark"] == "kv:planted") & (overlap["pool"] == "organism")].iloc[0]
    assert (row["n"], row["contaminated"], row["n_clean"]) == (2, 1, 1)


def test_the_report_opens_with_the_three_items_of_every_study(ci_run):
    from refusal_audit import report

    run, *_ = next(iter(ci_run.values()))
    run.names = list(ci_run)
    run.audit()
    page = report.write(run).read_text()
    assert "TESTBED" in page
    for name in ci_run:
        for item in ("1. contamination check", "2. seed floor", "3. operational definitions"):
            assert f"{name}: {item}" in page


def test_statistics_use_the_decontaminated_items(ci_run):
    """A planted audit hit takes its item's whole unit (a confusion cluster) out of every statistic; a
    hit in a pool the study does not rest on (the judges', instruments here) takes nothing out; a dataset
    whose every unit is hit is reported as excluded and the rest is still analysed."""
    run, *_ = ci_run["confusion"]
    path = run.folder("confusion") / "contamination.parquet"
    original = pd.read_parquet(path)
    items = run.table("items", "confusion")
    assert run.study("confusion").audited_pools(run.p) == ["organism"]
    assert run.study("kv").audited_pools(run.p) == ["organism", "judges", "kv"]  # kv: its style-shift control's pool
    xs_cluster = items.loc[items["dataset"] == "xstest", "cluster"].iloc[0]
    one_member = items.loc[(items["cluster"] == xs_cluster) & (items["member"] == 1), "item_id"].iloc[0]
    benign = items.loc[items["dataset"] == "jailbreakbench_benign", "item_id"]
    other_pool = items.loc[items["dataset"] == "harmbench", "item_id"].iloc[0]
    hits = {f"confusion:{i}": "organism" for i in [one_member, *benign]} | {f"confusion:{other_pool}": "judges"}
    planted = original.assign(contaminated=False)  # only the planted hits
    for item, pool in hits.items():
        planted.loc[(planted["id"] == item) & (planted["pool"] == pool), "contaminated"] = True
    try:
        planted.to_parquet(path)
        kept, table = run.decontaminated("confusion")
        gone = set(items["item_id"]) - set(kept["item_id"])
        expected = set(items.loc[(items["cluster"] == xs_cluster) | (items["dataset"] == "jailbreakbench_benign"),
                                 "item_id"])
        assert gone == expected and other_pool in set(kept["item_id"])
        status = table.set_index("dataset")["status"]
        assert status["jailbreakbench_benign"] == "excluded: entirely contaminated"
        assert status["xstest"] == status["harmbench"] == "used"
        stats = run.analyse()["confusion"]
        assert not set(stats["prompts"]["item_id"]) & gone
        assert stats["decontamination"].set_index("dataset").loc["xstest", "excluded"] == (items["cluster"] == xs_cluster).sum()
    finally:
        original.to_parquet(path)
        run.analyse()  # the shared run's statistics as they were
