"""The ray executor on a local Ray instance (2 CPU workers): the stage tables of a small kv run (the ci params
cut to one model and two harmful prompts: several prompts sharing a prefix, several policies and the MMLU
answer cue, so that groups and row order matter) equal the local executor's, and a worker killed after
writing a shard costs nothing (its shard is kept, the rest redone). Every study generates through the
same ``executor.generate``."""
import shutil

import pandas as pd
import pytest
import ray  # the test extra installs it (pip install -e '.[test]'); the package needs it only for executor: ray
import yaml

from refusal_audit import executor, paths, pipeline
from refusal_audit.paths import ROOT

CI = ROOT / "params" / "ci.yaml"
STUDIES = ["kv"]
MODEL = "smollm2-135m-guarded"


def params(folder, run_name: str, **executor_keys):
    raw = yaml.safe_load(CI.read_text())
    raw["models"] = {MODEL: raw["models"][MODEL]}
    raw["kv"].update(models=[MODEL], positive_control=None, null_control=MODEL, sink_ablation=[4])
    raw["kv"]["data"].update(n_harmful=2, mmlu_per_subject=1)
    raw["frames"].update(models=[MODEL], interaction_reference="")
    raw["frames"].pop("base_of")
    raw = {k: v for k, v in raw.items() if k not in ("confusion", "policy")}
    raw.update(run_name=run_name, executor=executor_keys or {"kind": "local"})
    path = folder / f"{run_name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def kill_switch(tmp_path_factory):
    """A local Ray instance with two CPU workers; yields the kill switch's path (absent: disarmed)."""
    switch = tmp_path_factory.mktemp("kill") / "armed"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(executor.KILL_ENV, str(switch))  # before ray.init: the workers inherit it
        mp.delenv("RAY_ADDRESS", raising=False)
        mp.setenv("RAY_worker_register_timeout_seconds", "300")  # a worker importing torch on a busy runner
        executor.start_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)
        yield switch
        ray.shutdown()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, kill_switch):
    """The small run on the local executor, and new runs starting from a copy of its items and prompts (same
    model pool, results in a temporary folder)."""
    folder = tmp_path_factory.mktemp("params")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(paths, "RESULTS_DIR", tmp_path_factory.mktemp("results"))
        local = pipeline.Run(params(folder, "ci_local"), STUDIES)
        for stage in ("items", "prompts", "generate", "judge"):
            getattr(local, stage)()

        def start(run_name: str, only: list[str] = STUDIES, **executor_keys) -> pipeline.Run:
            run = pipeline.Run(params(folder, run_name, **executor_keys), only)
            run.models = local.models
            for study in only:
                run.folder(study).mkdir(parents=True)
                for name in ("items", "prompts"):
                    shutil.copy(local.folder(study) / f"{name}.parquet", run.folder(study))
            return run

        yield local, start


def test_ray_stage_tables_equal_the_local_executors(runs):
    local, start = runs
    run = start("ci_ray", kind="ray")
    run.generate()
    run.judge()
    for study in STUDIES:
        tables = sorted({f.name for f in run.folder(study).glob("*.parquet")} - {"items.parquet", "prompts.parquet"})
        assert {"generations.parquet", "judgments.parquet"} <= set(tables)
        for name in tables:
            pd.testing.assert_frame_equal(pd.read_parquet(run.folder(study) / name),
                                          pd.read_parquet(local.folder(study) / name), obj=name)
    assert run.p.executor.kind == "ray" and local.p.executor.kind == "local"


@pytest.mark.parametrize("retries", [3, 0], ids=["ray-retries", "rerun"])
def test_a_killed_worker_loses_nothing_finished(runs, kill_switch, retries):
    """The first worker to write a shard dies right after; Ray reruns its group (or, without retries,
    the stage fails and is run again): the table equals the uninterrupted one and the shard written
    before the kill is the one in the store (not generated again)."""
    local, start = runs
    run = start(f"ci_killed_{retries}", ["kv"], kind="ray", max_retries=retries)
    shards = run.folder("kv") / "shards" / "generations"
    kill_switch.touch()
    done = {}
    if not retries:
        with pytest.raises(ray.exceptions.RayError):
            run.generate()
        done = {f: f.stat().st_mtime_ns for f in shards.glob("*.parquet")}
    run.generate()
    pd.testing.assert_frame_equal(run.table("generations", "kv"), local.table("generations", "kv"))
    assert not kill_switch.exists()
    key, mtime = kill_switch.with_name("armed.killed").read_text().split()
    assert (shards / f"{key}.parquet").stat().st_mtime_ns == int(mtime)
    assert {f: f.stat().st_mtime_ns for f in done} == done  # the rerun kept every finished shard


def test_prefix_groups_keep_a_shared_prefix_together():
    common = list(range(100))
    prompts = pd.DataFrame({"input_ids": [common + [7], [5, 1], common + [3], [5, 2], common + [9], [6]]})
    assert executor.prefix_groups(prompts, 2) == [[2, 0, 4], [1, 3, 5]]
    assert executor.prefix_groups(prompts, 3) == [[2, 0], [4, 1], [3, 5]]  # a family over a share is cut
    assert sorted(sum(executor.prefix_groups(prompts, 6), [])) == list(range(6))


@pytest.mark.parametrize("section, message", [
    ({"kind": "dask"}, "executor.kind: expected local or ray, got 'dask'"),
    ({"num_workers": 0}, "executor.num_workers: expected an integer >= 1, got 0"),
    ({"max_retries": -1}, "executor.max_retries: expected an integer >= 0, got -1"),
])
def test_a_bad_executor_section_is_named(section, message):
    from refusal_audit import config

    raw = yaml.safe_load(CI.read_text()) | {"executor": section}
    with pytest.raises(config.ParamsError, match=f"^x.yaml: {message}$"):
        config.from_dict(raw, "x.yaml")


class _Init:
    """A stand-in for ``ray.init`` that fails with the given errors, then succeeds."""

    def __init__(self, errors):
        self.errors, self.calls, self.shutdowns = list(errors), 0, 0

    def __call__(self, **kwargs):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return kwargs


STARTUP = Exception("The current node timed out during startup. This could happen because some of the raylet "
                    "failed to startup or the GCS has become overloaded.")


def test_ray_startup_is_tried_again_on_a_busy_machine_and_nothing_else_is(monkeypatch):
    """A node that times out during startup (Ray's fixed 30 s wait) is started again, at most ``tries`` times
    in all; any other error is raised at once, and so is the last timeout."""
    init = _Init([STARTUP, STARTUP])
    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: setattr(init, "shutdowns", init.shutdowns + 1))
    assert executor.start_ray(tries=3, num_cpus=2) == {"num_cpus": 2}
    assert (init.calls, init.shutdowns) == (3, 2)
    init = _Init([STARTUP, STARTUP])
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(Exception, match="timed out during startup"):
        executor.start_ray(tries=2)
    assert init.calls == 2
    init = _Init([RuntimeError("port 6379 in use")])
    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(RuntimeError, match="port 6379"):
        executor.start_ray(tries=3)
    assert init.calls == 1
