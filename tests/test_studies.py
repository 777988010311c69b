"""Every registered study runs end to end through the one pipeline (kvpress runs one test over every
press); every shipped params file passes `make check`; the registry refuses what it cannot run."""
import io

import pandas as pd
import pytest

from refusal_audit import config, models, pipeline, studies
from refusal_audit.paths import PARAMS_DIR, ROOT

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
    """Adding a study is registering a module: ``tests/toy_study.py`` (its own params section, its own table
    names and a scores schema of its own) runs through the six stages in the run folder of a finished real
    study, which it leaves as it was."""
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
    studies.register("toy", "toy_study")
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
    finally:
        del studies.REGISTRY["toy"]
        shutil.rmtree(run.folder("toy"), ignore_errors=True)
        shutil.rmtree(run.dir / "stats" / "toy", ignore_errors=True)
        for f in (run.dir / "figures").glob("toy_*"):
            f.unlink()
        (run.dir / "contamination.csv").write_bytes(contamination)


def test_registry_refuses_unknown_and_repeated_names():
    with pytest.raises(ValueError, match="unknown study 'kvv'"):
        studies.module("kvv")
    with pytest.raises(ValueError, match="study 'kv' is registered twice"):
        studies.register("kv", "somewhere.else")
    with pytest.raises(ValueError, match="STUDIES: unknown study 'kvv'"):
        studies.select(["kv"], "kvv")
    with pytest.raises(ValueError, match="STUDIES: study 'kv' named twice"):
        studies.select(["kv"], "kv,kv")
    assert studies.select(["kv"], "") == ["kv"]


@pytest.mark.parametrize("name", list(studies.REGISTRY))
def test_stage_functions_survive_importing_every_submodule(name):
    """Importing a submodule binds its name on the package: one named like a stage (``figures.py``)
    would replace the stage function after its first import (the CI failure of stop 20)."""
    import importlib
    import pkgutil

    module = studies.module(name)
    for info in pkgutil.iter_modules(module.__path__):
        importlib.import_module(f"{module.__name__}.{info.name}")
        assert info.name not in studies.STAGES, f"{name}: submodule {info.name}.py shadows the stage function"
    for stage in studies.STAGES:
        assert callable(getattr(module, stage)), f"{name}.{stage} is not a function"


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
