"""Every registered study runs end to end through the one pipeline (kvpress runs one test over every
press); every shipped params file passes `make check`; the registry refuses what it cannot run."""
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
    run, tables, figures = ci_run[name]
    for table in ("items", "prompts", "generations", "judgments"):
        df = run.table(table, name)
        assert len(df) and (df["study"] == name).all(), table
    assert tables and all(len(t) for t in tables.values())
    assert sorted(f.stem for f in (run.dir / "stats" / name).glob("*.csv")) == sorted(tables)
    assert figures and all((run.dir / "figures" / f"{f}.png").is_file() and f.startswith(f"{name}_") for f in figures)


def test_a_subset_run_keeps_the_other_studies_rows(ci_run, tmp_path):
    run, *_ = next(iter(ci_run.values()))
    items = pd.read_parquet(run.dir / "items.parquet")
    other = items.assign(study="elsewhere")
    run._save("items", {"elsewhere": other})
    run.items()  # rewrites this run's studies' rows only
    after = pd.read_parquet(run.dir / "items.parquet")
    assert (after["study"] == "elsewhere").sum() == len(other)
    assert (after["study"] != "elsewhere").sum() == len(items)
    run._save("items", {"elsewhere": other.iloc[:0]})


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
    path = run.dir / "contamination_items.parquet"
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
